"""Fleet benchmark: which sglang-router policy keeps a robot on the node holding its cached
image and prompt (prefix-cache hit rate, TTFT P50/P99), round_robin vs cache_aware.

Robots x nodes (default 4 x 2) on the demo VLA, behind sglang-router 0.3.2. Each robot runs a
control loop: its own instruction and its own (static) camera frame, one streamed robot request
after the other (the nodes' robot defaults make the router's plain SGLang request an action
request). The nodes' KV pools are sized to hold about robots/nodes robots' prompts each, so a
policy that spreads one robot over every node evicts other robots' prefixes. The nodes are
started once; before each policy their caches are flushed and a fresh router is started. The hit
rate is the share of prompt tokens the nodes served from their radix caches (`cached_tokens` /
`prompt_tokens` of every reply), first requests included.

    python -m vla_server.bench fleet [--robots 4] [--nodes 2] [--rounds 12]
        [--prompt shared-template|robot-first]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
from pathlib import Path
from typing import Any

import httpx

from vla_harness.server_subprocess import running_server
from vla_harness.stats import plot_distributions, summary_ms, table, write_json
from vla_server.bench.multimodal import camera_frames
from vla_server.bench.stream_client import StreamTiming, timed_stream
from vla_server.fleet import running_router
from vla_server.policies.llava.demo import demo_model_path

POLICIES = ("round_robin", "cache_aware")
TASKS = ("pick up the red block", "open the top drawer", "fold the towel", "stack the cups")
# The same words in two orders: sglang-router's cache_aware matches the text's leading
# characters, so where the robot's own words stand decides where it routes each robot.
_ASK = "In: What action should the robot take to {task}?"
PROMPTS = {
    "shared-template": _ASK + " Robot {robot}.\n<image>\nOut:",
    "robot-first": "Robot {robot}. " + _ASK + "\n<image>\nOut:",
}
PROMPT_TOKENS_PER_ROBOT = 260  # the demo's 196 image tokens, the text, the actions


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--robots", type=int, default=4)
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--rounds", type=int, default=12, help="requests per robot and policy")
    p.add_argument("--num-actions", type=int, default=1)
    p.add_argument("--prompt", choices=list(PROMPTS), default="shared-template")
    p.add_argument("--out", type=Path, default=Path("bench_out/fleet"))


def robot_body(robot: int, image: str, prompt: str = "shared-template") -> dict[str, Any]:
    """What a robot sends through the router: plain SGLang fields only."""
    task = TASKS[robot % len(TASKS)]
    return {
        "text": PROMPTS[prompt].format(task=task, robot=robot),
        "image_data": image,
        "sampling_params": {"temperature": 0},
    }


async def _robot(
    client: httpx.AsyncClient, body: dict[str, Any], rounds: int, done: list[int]
) -> list[StreamTiming]:
    out = []
    for _ in range(rounds):
        out.append(await timed_stream(client, body))
        done[0] += 1
    return out


async def _progress(done: list[int], total: int, policy: str) -> None:
    while done[0] < total:
        print(f"\r  {policy}: {done[0]}/{total} requests", end="", flush=True)
        await asyncio.sleep(0.5)


async def _drive(
    url: str, bodies: list[dict[str, Any]], rounds: int, policy: str
) -> list[StreamTiming]:
    done = [0]
    total = len(bodies) * rounds
    limits = httpx.Limits(max_connections=len(bodies) + 4)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:
        progress = asyncio.create_task(_progress(done, total, policy))
        per_robot = await asyncio.gather(*(_robot(client, b, rounds, done) for b in bodies))
        await progress
    print(f"\r  {policy}: {total}/{total} requests")
    return [t for robot in per_robot for t in robot]


def _generate_count(url: str) -> float:
    """The node's answered `/generate` requests (vla_http_requests_total)."""
    lines = httpx.get(url + "/metrics", timeout=30).text.splitlines()
    mine = [x for x in lines if x.startswith('vla_http_requests_total{route="/generate"')]
    return sum(float(x.rsplit(" ", 1)[1]) for x in mine)


def _measure(
    policy: str, urls: list[str], bodies: list[dict[str, Any]], args: argparse.Namespace, logs: Path
) -> dict[str, Any]:
    for url in urls:
        assert httpx.post(url + "/flush_cache", timeout=60).json()["success"]
    before = [_generate_count(u) for u in urls]
    with running_router(urls, policy=policy, log_path=logs / f"router-{policy}.log") as router:
        timings = asyncio.run(_drive(router.url, bodies, args.rounds, policy))
    per_node = [int(_generate_count(u) - b) for u, b in zip(urls, before, strict=True)]
    metas = [t.last["meta_info"] for t in timings if t.last]
    prompt = sum(m["prompt_tokens"] for m in metas)
    cached = sum(m["cached_tokens"] for m in metas)
    ttft = [t.ttft for t in timings]
    return {
        "policy": policy,
        "requests": len(timings),
        "with_actions": sum(bool(t.actions_at) for t in timings),
        "requests_per_node": per_node,
        "prefix_hit_rate": cached / prompt if prompt else float("nan"),
        "ttft_ms": summary_ms(ttft),
        "ttft_s": ttft,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    path = demo_model_path()
    kv = PROMPT_TOKENS_PER_ROBOT * max(1, -(-args.robots // args.nodes)) + 64
    flags = ["--default-num-actions", str(args.num_actions), "--default-unnorm-key", "demo_arm"]
    flags += ["--max-total-tokens", str(kv)]
    frames = [camera_frames(1, 320, 240, 90, seed=r)[0] for r in range(args.robots)]
    bodies = [robot_body(r, frame, args.prompt) for r, frame in enumerate(frames)]
    print(
        f"{args.robots} robots x {args.nodes} nodes, KV pool {kv} tokens each, {args.rounds} "
        f"rounds, {args.prompt} prompts"
    )
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        logs = Path(tmp)
        print(f"starting {args.nodes} nodes ...", flush=True)
        nodes = [
            stack.enter_context(running_server(path, extra=flags, log_path=logs / f"node-{i}.log"))
            for i in range(args.nodes)
        ]
        urls = [n.url for n in nodes]
        results = [_measure(p, urls, bodies, args, logs) for p in POLICIES]
    rows = [
        {
            "policy": r["policy"],
            "requests": r["requests"],
            "with actions": r["with_actions"],
            "per node": "/".join(map(str, r["requests_per_node"])),
            "prefix hit rate": r["prefix_hit_rate"],
            "TTFT p50 ms": r["ttft_ms"]["p50"],
            "TTFT p99 ms": r["ttft_ms"]["p99"],
        }
        for r in results
    ]
    print()
    print(table(rows, list(rows[0])))
    out = {
        "robots": args.robots,
        "nodes": args.nodes,
        "rounds": args.rounds,
        "kv_tokens": kv,
        "prompt": args.prompt,
        "results": results,
    }
    write_json(args.out / "fleet.json", out)
    plot_distributions(
        args.out / "fleet.png",
        f"TTFT through sglang-router, {args.robots} robots x {args.nodes} nodes",
        {r["policy"]: r["ttft_s"] for r in results},
    )
    print(f"wrote {args.out}/fleet.json and fleet.png")
    return out
