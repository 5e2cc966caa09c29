"""Served chunks against transformers in-process, in one run on one folder (`bench pi`).

* pi0 / pi0.5: the node serves `POST /v1/actions` with two new 640x480 JPEG frames, a state
  and a seed per request, one robot in a closed loop; between its rounds, transformers'
  `sample_actions` runs in this process on preprocessed tensors (it pays no HTTP and no JPEG),
  one observation at a time, at each reference thread count; then LeRobot's own policy in its
  venv (`lerobot_reference.py`) while the node idles, and one more node round. Then 8 robots in
  closed loops: chunks/s against the serial reference (1 / its mean time per chunk), the
  node's rows per action-head pass and its phase clocks.
* pi0-FAST: the same robot loop (relaxed decoding: the random model's chunks seldom have the
  exact length) against transformers' PaliGemma `generate`, greedy, on an input of the same
  length (images + prompt) and for the same number of new tokens as each served chunk took.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from vla_harness.server_subprocess import ServerProcess, run_server
from vla_harness.stats import summary_ms
from vla_server.bench.flow_loop import robot_interface, served_run
from vla_server.policies.pi_common.bench.lerobot_reference import lerobot_reference
from vla_server.policies.pi_common.bench.paths import HfPath, PhaseTimer, observation

FAST_FIELDS = {"relaxed_decoding": True}


def _timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _rounds(server: ServerProcess, rounds: int, chunks: int, extra: dict[str, Any] | None,
            reference: Callable[[int, dict[str, Any]], list[float]],
            threads: list[int], first_seed: int = 1000) -> dict[str, Any]:  # fmt: skip
    """`rounds` x (the node's `chunks` served chunks, then the reference's at each thread
    count), so both see the same machine; round r's frames come from seed `first_seed + r`
    (new frames: no round may find another's prefix in the cache)."""
    robot_io = robot_interface(server)
    asyncio.run(served_run(server, robot_io, 1, 2, seed=99, extra=extra))  # warm-up
    node: list[float] = []
    ref: dict[int, list[float]] = {n: [] for n in threads}
    for r in range(rounds):
        seed = first_seed + r
        run = asyncio.run(served_run(server, robot_io, 1, chunks, seed=seed, extra=extra))
        node += run["latencies_s"]
        for n in threads:
            torch.set_num_threads(n)
            ref[n] += reference(r, run)
        print(f"  round {r + 1}/{rounds}: node P50 {1e3 * statistics.median(node):.0f} ms",
              flush=True)  # fmt: skip
    return {"node_s": node, "reference_s": {str(n): v for n, v in ref.items()}}


def _ratios(timed: dict[str, Any]) -> list[dict[str, Any]]:
    node = statistics.median(timed["node_s"])
    return [
        {"reference_threads": n, "node_p50_ms": round(1e3 * node, 1),
         "reference_p50_ms": round(1e3 * statistics.median(v), 1),
         "ratio": round(node / statistics.median(v), 3)}
        for n, v in timed["reference_s"].items()
    ]  # fmt: skip


def flow_served(kind: str, folder: Path, rounds: int, chunks: int, threads: list[int],
                robots: int, lerobot: bool) -> dict[str, Any]:  # fmt: skip
    """One robot served vs `sample_actions` (and LeRobot's `predict_action_chunk`, when
    `lerobot`), then `robots` robots vs the serial reference."""
    print(f"{kind} served: loading transformers' model, starting the node on {folder} ...")
    hf = HfPath(folder, kind)

    def reference(r: int, _run: dict[str, Any]) -> list[float]:
        obs = [observation(folder, seed=100 * r + i) for i in range(chunks + 1)]
        hf.sample(obs[0], PhaseTimer())  # warm at this thread count
        return [_timed(lambda o=o: hf.sample(o, PhaseTimer())) for o in obs[1:]]

    with run_server(folder, Path(tempfile.mkdtemp(prefix="vla-bench-pi-"))) as server:
        timed = _rounds(server, rounds, chunks, None, reference, threads)
        if lerobot:  # while the node idles, then one more round of it beside LeRobot's
            timed["lerobot"] = lerobot_reference(folder, kind, threads, rounds * chunks)
            again = _rounds(server, 1, chunks, None, lambda *_: [], [], first_seed=2000)
            timed["node_s"] += again["node_s"]
        print(f"{kind} served: {robots} robots in closed loops ...", flush=True)
        fleet = asyncio.run(served_run(server, robot_interface(server), robots, chunks, seed=8))
    serial = {n: 1.0 / statistics.mean(v) for n, v in timed["reference_s"].items()}
    rate = fleet["chunks_per_s"]
    fleet_rows = [
        {"robots": robots, "reference_threads": n, "node_chunks_per_s": round(rate, 3),
         "serial_reference_chunks_per_s": round(s, 3), "ratio": round(rate / s, 3),
         "rows_per_pass": round(fleet["rows_per_pass"], 2)}
        for n, s in serial.items()
    ]  # fmt: skip
    fleet.pop("latencies_s")
    return {"kind": kind, "one_robot": _ratios(timed), "fleet": fleet_rows, "fleet_run": fleet,
            "node_ms": summary_ms(timed["node_s"]), "vs_lerobot": _vs_lerobot(timed),
            **timed}  # fmt: skip


def _vs_lerobot(timed: dict[str, Any]) -> list[dict[str, Any]]:
    if "lerobot" not in timed:
        return []
    node = 1e3 * statistics.median(timed["node_s"])
    return [
        {"lerobot_threads": n, "node_p50_ms": round(node, 1),
         "lerobot_p50_ms": round(r["p50_ms"], 1), "ratio": round(node / r["p50_ms"], 3),
         **{f"lerobot_{p}_ms": round(ms, 1) for p, ms in r["phases_p50_ms"].items()}}
        for n, r in timed["lerobot"]["by_threads"].items()
    ]  # fmt: skip


def fast_served(folder: Path, rounds: int, chunks: int, threads: list[int]) -> dict[str, Any]:
    """One pi0-FAST robot served vs PaliGemma `generate` of as many tokens per chunk."""
    from vla_server.policies.pi_common.hf_reference import hf_paligemma

    print(f"pi0fast served: loading transformers' PaliGemma, starting the node on {folder} ...")
    model = hf_paligemma(folder)
    size = model.config.vision_config.image_size
    per_image = model.config.text_config.num_image_tokens

    def generate(prompt_tokens: int, new_tokens: int, seed: int) -> float:
        text = prompt_tokens - 2 * per_image
        ids = torch.tensor([[model.config.image_token_id] * (2 * per_image) + [3] * text])
        types = torch.zeros_like(ids)
        types[:, -3:] = 1  # the causal "Action: " tail after the bidirectional prefix
        pixels = torch.rand((2, 3, size, size), generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            return _timed(lambda: model.generate(
                input_ids=ids, pixel_values=pixels * 2 - 1, attention_mask=torch.ones_like(ids),
                token_type_ids=types, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                do_sample=False,
            ))  # fmt: skip

    def reference(r: int, run: dict[str, Any]) -> list[float]:
        prompt = run["prompt_tokens"]
        generate(prompt, 2, seed=r)  # warm at this thread count
        return [generate(prompt, n, seed=r * 100 + i)
                for i, n in enumerate(run["completion_tokens"])]  # fmt: skip

    with run_server(folder, Path(tempfile.mkdtemp(prefix="vla-bench-pi-"))) as server:
        timed = _rounds(server, rounds, chunks, FAST_FIELDS, reference, threads)
    return {"kind": "pi0fast", "one_robot": _ratios(timed),
            "node_ms": summary_ms(timed["node_s"]), **timed}  # fmt: skip
