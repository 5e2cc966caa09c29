"""The node next to `transformers serve` on the same LLaVA checkpoint: 8 robots' throughput and
one robot's latency, OpenAI chat with an image and 16 new tokens, greedy.

Both servers are started here on loopback and measured in turns (node, then peer, each round),
so load drift hits both; every round's ratio is reported, not only the pooled one. A robot
sends its next request as soon as its previous reply arrived (closed loop), each with a frame
of its own camera that no robot sent before (so no image cache helps the node).
`transformers serve` needs `accelerate` (`pip install "transformers[serving]==5.24.0"`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil

from vla_harness.server_subprocess import LOOPBACK, ServerProcess, free_port, run_server
from vla_harness.stats import summary_ms
from vla_server.bench.cpu_accounting import CLIENT, by_process, cpu_snapshot
from vla_server.bench.multimodal import camera_frames
from vla_server.bench.raw_step import measure_decode_steps, measure_extend_forwards
from vla_server.model.model_runner import ModelRunner
from vla_server.policies.registry import detect

NEW_TOKENS = 16
START_TIMEOUT_S = 180.0


@contextlib.contextmanager
def transformers_serve(path: Path, log: Path) -> Iterator[tuple[str, int]]:
    """`transformers serve` on `path` (CPU, loopback, offline); yields its base URL and pid."""
    port = free_port()
    exe = Path(sys.executable).with_name("transformers")
    cmd = [str(exe), "serve", str(path), "--device", "cpu", "--host", LOOPBACK, "--port", str(port)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://{LOOPBACK}:{port}"
    try:
        _wait_healthy(url, proc, log)
        yield url, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def _wait_healthy(url: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"transformers serve exited: {log.read_text()[-2000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        time.sleep(0.5)
    raise RuntimeError(f"transformers serve not healthy after {START_TIMEOUT_S} s")


def chat_body(model: str, frame_b64: str, robot: int) -> dict[str, Any]:
    image = {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{frame_b64}"}}
    text = {"type": "text", "text": f"robot {robot}: pick up the red block"}
    return {
        "model": model,
        "messages": [{"role": "user", "content": [image, text]}],
        "max_tokens": NEW_TOKENS,
        "temperature": 0,
    }


async def robots(url: str, model: str, frames: list[list[str]]) -> dict:
    """One robot per list of frames, a request per frame, closed loop: wall time, requests/s,
    per-request seconds."""
    latencies: list[float] = []

    async def robot(client: httpx.AsyncClient, i: int) -> None:
        for frame in frames[i]:
            t0 = time.perf_counter()
            r = await client.post("/v1/chat/completions", json=chat_body(model, frame, i))
            r.raise_for_status()
            latencies.append(time.perf_counter() - t0)

    limits = httpx.Limits(max_connections=len(frames) + 4)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:
        t0 = time.perf_counter()
        await asyncio.gather(*(robot(client, i) for i in range(len(frames))))
        wall = time.perf_counter() - t0
    n = sum(len(f) for f in frames)
    return {"wall_s": wall, "rps": n / wall, "latency_s": latencies}


def compare(path: Path, n_robots: int, requests: int, rounds: int) -> list[dict[str, Any]]:
    """Per round: the node's and the peer's 8-robot throughput and 1-robot mean latency."""
    cameras = iter(range(10_000))  # a new seed per robot and run: every frame is new

    def new_frames(n: int) -> list[list[str]]:
        return [camera_frames(requests, 640, 480, 90, seed=next(cameras)) for _ in range(n)]

    logs = Path(tempfile.mkdtemp(prefix="vla-bench-peer-"))
    rows = []
    with run_server(path, logs) as node, transformers_serve(path, logs / "peer.log") as peer:
        servers = {
            "node": (node.url, str(path), lambda: _node_cpu_s(node)),
            "transformers serve": (peer[0], str(path), lambda: _process_cpu_s(peer[1])),
        }
        for url, model, _ in servers.values():  # warm-up: first calls load code and kernels
            asyncio.run(robots(url, model, [new_frames(1)[0][:2]]))
        reply = httpx.post(
            node.url + "/v1/chat/completions", json=chat_body(str(path), new_frames(1)[0][0], 0)
        )
        prompt_tokens = reply.json()["usage"]["prompt_tokens"]
        for r in range(rounds):
            print(f"  peer round {r + 1}/{rounds}: {n_robots} robots, then 1", flush=True)
            many, one = new_frames(n_robots), new_frames(1)
            got = {
                name: _measured(url, model, cpu, many, one)
                for name, (url, model, cpu) in servers.items()
            }
            rows.append(_row(r, got))
    floor = latency_floor(path, prompt_tokens)
    print(
        f"one request's model work alone: vision {floor['vision_ms']:.2f} + prefill of "
        f"{prompt_tokens} tokens {floor['prefill_ms']:.2f} + "
        f"{NEW_TOKENS - 1} x decode {floor['decode_ms']:.2f} = {floor['request_ms']:.1f} ms"
    )
    for row in rows:
        row["floor_latency_ms"] = floor["request_ms"]
        row["floor_vs_peer_latency"] = floor["request_ms"] / row["peer_latency_ms"]
    return rows


def latency_floor(path: Path, prompt_tokens: int, new_tokens: int = NEW_TOKENS) -> dict[str, float]:
    """One request's model work alone, in-process (ms): the vision tower on one frame, the
    prompt's prefill and `new_tokens - 1` decode forwards; what no serving design goes below."""
    runner = ModelRunner(
        detect(path), max_total_tokens=1024, max_running_requests=2, progress=False
    )
    assert runner.vision is not None
    side = runner.vision.spec.image_size
    pixels = np.zeros((3, side, side), np.float32)
    vision = []
    for _ in range(12):
        t0 = time.perf_counter()
        runner.encode_images([pixels])
        vision.append(time.perf_counter() - t0)
    decode: list[float] = []
    measure_decode_steps(path, 1, 40, forwards=decode)
    out = {
        "vision_ms": summary_ms(vision[2:])["p50"],
        "prefill_ms": summary_ms(measure_extend_forwards(path, prompt_tokens, 0, 10))["p50"],
        "decode_ms": summary_ms(decode)["p50"],
    }
    out["request_ms"] = out["vision_ms"] + out["prefill_ms"] + (new_tokens - 1) * out["decode_ms"]
    return out


def _measured(
    url: str, model: str, cpu: Any, many: list[list[str]], one: list[list[str]]
) -> tuple[dict, dict]:
    """The many-robot run with the server's CPU ms per request (by process for the node), then
    the one-robot run."""
    before = cpu()
    result = asyncio.run(robots(url, model, many))
    after = cpu()
    n = sum(len(f) for f in many)
    result["cpu_ms_per_request"] = {k: (after[k] - before.get(k, 0.0)) * 1e3 / n for k in after}
    return result, asyncio.run(robots(url, model, one))


def _node_cpu_s(node: ServerProcess) -> dict[str, float]:
    """CPU seconds per node process, without the bench client's."""
    return {p: s for p, s in by_process(cpu_snapshot(node)).items() if p != CLIENT}


def _process_cpu_s(pid: int) -> dict[str, float]:
    times = psutil.Process(pid).cpu_times()
    return {"transformers serve": times.user + times.system}


def _row(r: int, got: dict[str, tuple[dict, dict]]) -> dict[str, Any]:
    (node_many, node_one), (peer_many, peer_one) = got["node"], got["transformers serve"]
    node_lat = sum(node_one["latency_s"]) / len(node_one["latency_s"])
    peer_lat = sum(peer_one["latency_s"]) / len(peer_one["latency_s"])
    cpu = {**node_many["cpu_ms_per_request"], **peer_many["cpu_ms_per_request"]}
    return {
        "round": r + 1,
        **{f"cpu ms/request: {k}": v for k, v in cpu.items()},
        "node_rps": node_many["rps"],
        "peer_rps": peer_many["rps"],
        "throughput_ratio": node_many["rps"] / peer_many["rps"],
        "node_latency_ms": node_lat * 1e3,
        "peer_latency_ms": peer_lat * 1e3,
        "latency_ratio": node_lat / peer_lat,
    }
