"""One served flow benchmark run: robots in closed loops, each sending its next camera frames
(new JPEGs, so no cache reuse) with its state and a seed to `POST /v1/actions` as soon as its
chunk arrives, and the node's counters and phase clocks around them (`flow.py`,
`flow_rtc.py`)."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Protocol

import httpx

from vla_harness.server_subprocess import ServerProcess
from vla_harness.stats import summary_ms
from vla_server.bench.multimodal import camera_frames

INSTRUCTION = "pick up the red block and put it in the bowl"
PHASES = ("vision", "decoder", "action_head")


class Guided(Protocol):
    """Fields a robot adds to each chunk request from its previous chunk (`flow_rtc.py`)."""

    def fields(self, prev: list[list[float]]) -> dict[str, Any]: ...


async def _robot(
    client: httpx.AsyncClient,
    robot_io: dict[str, Any],
    frames: list[str],
    robot: int,
    n: int,
    guided: Guided | None = None,
    extra: dict[str, Any] | None = None,
) -> list[tuple[float, dict[str, int]]]:
    """`n` timed chunks (seconds, the reply's token usage); a `guided` robot first gets one
    untimed chunk to continue from; `extra`: fields every request adds."""
    cams, per = len(robot_io["cameras"]), n + (guided is not None)
    out: list[tuple[float, dict[str, int]]] = []
    prev: list[list[float]] | None = None
    for i in range(per):
        k = (robot * per + i) * cams
        body = {
            "instruction": INSTRUCTION,
            "image_data": frames[k : k + cams],
            "state": [0.1 * (robot + 1)] * robot_io["state_dim"],
            "seed": robot * per + i,
        }
        if guided is not None and prev is not None:
            body.update(guided.fields(prev))
        body.update(extra or {})
        t0 = time.perf_counter()
        reply = await client.post("/v1/actions", json=body)
        seconds = time.perf_counter() - t0
        if reply.status_code != 200 or len(reply.json()["actions"]) != robot_io["chunk_size"]:
            raise SystemExit(f"/v1/actions failed: {reply.status_code} {reply.text[:300]}")
        if guided is None or prev is not None:
            out.append((seconds, reply.json()["usage"]))
        prev = reply.json()["actions"]
    return out


async def _counters(client: httpx.AsyncClient) -> dict[str, Any]:
    info = (await client.get("/get_server_info")).json()
    return info["internal_states"][0]["model_counters"]


async def served_run(
    server: ServerProcess,
    robot_io: dict[str, Any],
    robots: int,
    chunks: int,
    seed: int,
    guided: Guided | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    per = chunks + (guided is not None)
    frames = camera_frames(robots * per * len(robot_io["cameras"]), 640, 480, 90, seed)
    async with server.async_client(timeout=600) as client:
        before = await _counters(client)
        t0 = time.perf_counter()
        per_robot = await asyncio.gather(
            *(_robot(client, robot_io, frames, r, chunks, guided, extra) for r in range(robots))
        )
        wall = time.perf_counter() - t0
        after = await _counters(client)
    latencies = [t for robot in per_robot for t, _ in robot]
    passes = after["expert_passes"] - before["expert_passes"]
    rows = after["expert_rows"] - before["expert_rows"]
    seconds = {p: after["seconds"].get(p, 0.0) - before["seconds"].get(p, 0.0) for p in PHASES}
    return {
        "robots": robots,
        "chunks": len(latencies),
        "time_to_chunk_ms": summary_ms(latencies),
        "chunks_per_s": len(latencies) / wall,
        "expert_passes": passes,
        "rows_per_pass": rows / passes if passes else 0.0,
        "phase_ms_per_chunk": {p: 1000.0 * s / len(latencies) for p, s in seconds.items()},
        "latencies_s": latencies,
        "completion_tokens": [u["completion_tokens"] for robot in per_robot for _, u in robot],
        "prompt_tokens": max(u["prompt_tokens"] for robot in per_robot for _, u in robot),
    }


def robot_interface(server: ServerProcess) -> dict[str, Any]:
    info = httpx.get(server.url + "/get_model_info", timeout=30).json()
    if "robot" not in info:
        raise SystemExit(f"{info['model_path']} has no robot interface (cameras, state, chunk)")
    return info["robot"]
