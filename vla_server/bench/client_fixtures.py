"""The replay test's fixtures: distinct request bodies third-party clients sent to a node.

`drive_router` sends a robot's requests through sglang-router 0.3.2 to one node (behind the
capture proxy, so what is recorded is what the router forwards, and the router's own
registration, health and load calls). `write_fixtures` keeps, per tool, the first request of
each distinct shape (method, path, streamed or not, the body's keys and value types: not
its values), so that a
benchmark's hundred look-alike prompts become one fixture.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from vla_server.bench.multimodal import camera_frames
from vla_server.fleet import running_router

ROBOT_PROMPT = "In: What action should the robot take to pick up the red block?\n<image>\nOut:"


def _router_requests(model: str) -> list[tuple[str, dict[str, Any]]]:
    """What a robot and an SGLang user send to the router (it rebuilds each one)."""
    robot = {"text": ROBOT_PROMPT, "image_data": camera_frames(1, 32, 24, 90, seed=0)[0]}
    robot["sampling_params"] = {"temperature": 0}
    chat = {"model": model, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}
    return [
        ("/generate", robot),
        ("/generate", {**robot, "stream": True, "priority": 1, "rid": "robot-0-frame-1"}),
        ("/generate", {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 3}}),
        ("/v1/chat/completions", chat),
        ("/v1/chat/completions", {**chat, "stream": True}),
        ("/v1/completions", {"model": model, "prompt": "hello", "max_tokens": 4}),
    ]


def drive_router(node_url: str, model: str, log_path: Path) -> None:
    """Registration, one load query and each request of `_router_requests` through the router."""
    with (
        running_router([node_url], policy="round_robin", log_path=log_path) as router,
        httpx.Client(base_url=router.url, timeout=120) as c,
    ):
        c.get("/get_loads").raise_for_status()
        for path, body in _router_requests(model):
            r = c.post(path, json=body)
            print(f"  router {path}: {r.status_code}", flush=True)
            r.raise_for_status()


def _shape(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [_shape(value[0])] if value else []
    return type(value).__name__


def distinct(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen, out = set(), []
    for req in requests:
        body = req.get("body")
        stream = body.get("stream") if isinstance(body, dict) else None
        key = json.dumps([req["method"], req["path"], stream, _shape(body)], sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append(req)
    return out


def write_fixtures(raw_dir: Path, dest: Path) -> None:
    """DIR/<tool>.json for every <tool>.jsonl the capture proxy wrote."""
    dest.mkdir(parents=True, exist_ok=True)
    for sink in sorted(raw_dir.glob("*.jsonl")):
        lines = [json.loads(line) for line in sink.read_text().splitlines() if line]
        kept = distinct(lines)
        (dest / f"{sink.stem}.json").write_text(json.dumps(kept, indent=1) + "\n")
        print(f"{sink.stem}: {len(lines)} requests, {len(kept)} distinct", flush=True)
