"""The node next to `transformers serve` on the same LLaVA checkpoint: 8 robots' throughput and
one robot's latency, OpenAI chat with an image and 16 new tokens, greedy.

Both servers are started here on loopback and measured in turns (node, then peer, each round),
so load drift hits both; every round's ratio is reported, not only the pooled one. A robot
sends its next request as soon as its previous reply arrived (closed loop).
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

from vla_server.bench.multimodal import camera_frames
from vla_server.server_subprocess import LOOPBACK, free_port, run_server

NEW_TOKENS = 16
START_TIMEOUT_S = 180.0


@contextlib.contextmanager
def transformers_serve(path: Path, log: Path) -> Iterator[str]:
    """`transformers serve` on `path` (CPU, loopback, offline); yields its base URL."""
    port = free_port()
    exe = Path(sys.executable).with_name("transformers")
    cmd = [str(exe), "serve", str(path), "--device", "cpu", "--host", LOOPBACK, "--port", str(port)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://{LOOPBACK}:{port}"
    try:
        _wait_healthy(url, proc, log)
        yield url
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


async def robots(url: str, model: str, n: int, requests: int, frames: list[str]) -> dict:
    """`n` robots, `requests` each, closed loop: wall time, requests/s, per-request seconds."""
    latencies: list[float] = []

    async def robot(client: httpx.AsyncClient, i: int) -> None:
        for k in range(requests):
            t0 = time.perf_counter()
            r = await client.post("/v1/chat/completions", json=chat_body(model, frames[k], i))
            r.raise_for_status()
            latencies.append(time.perf_counter() - t0)

    limits = httpx.Limits(max_connections=n + 4)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:
        t0 = time.perf_counter()
        await asyncio.gather(*(robot(client, i) for i in range(n)))
        wall = time.perf_counter() - t0
    return {"wall_s": wall, "rps": n * requests / wall, "latency_s": latencies}


def compare(path: Path, n_robots: int, requests: int, rounds: int) -> list[dict[str, Any]]:
    """Per round: the node's and the peer's 8-robot throughput and 1-robot mean latency."""
    frames = camera_frames(requests, 640, 480, 90, seed=5)
    logs = Path(tempfile.mkdtemp(prefix="vla-bench-peer-"))
    rows = []
    with run_server(path, logs) as node, transformers_serve(path, logs / "peer.log") as peer:
        servers = {"node": (node.url, str(path)), "transformers serve": (peer, str(path))}
        for url, model in servers.values():  # warm-up: first calls load code and kernels
            asyncio.run(robots(url, model, 1, 2, frames))
        for r in range(rounds):
            print(f"  peer round {r + 1}/{rounds}: {n_robots} robots, then 1", flush=True)
            got = {
                name: (
                    asyncio.run(robots(url, model, n_robots, requests, frames)),
                    asyncio.run(robots(url, model, 1, requests, frames)),
                )
                for name, (url, model) in servers.items()
            }
            rows.append(_row(r, got))
    return rows


def _row(r: int, got: dict[str, tuple[dict, dict]]) -> dict[str, Any]:
    (node_many, node_one), (peer_many, peer_one) = got["node"], got["transformers serve"]
    node_lat = sum(node_one["latency_s"]) / len(node_one["latency_s"])
    peer_lat = sum(peer_one["latency_s"]) / len(peer_one["latency_s"])
    return {
        "round": r + 1,
        "node_rps": node_many["rps"],
        "peer_rps": peer_many["rps"],
        "throughput_ratio": node_many["rps"] / peer_many["rps"],
        "node_latency_ms": node_lat * 1e3,
        "peer_latency_ms": peer_lat * 1e3,
        "latency_ratio": node_lat / peer_lat,
    }
