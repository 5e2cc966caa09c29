"""Multimodal benchmark: TTFT and time-to-first-action for a new vs a repeated camera frame.

Through the HTTP server on the demo VLA (or --model-path), one stream at a time: each round sends
a frame the node has never seen, then the same frame again with the same instruction, then with
another instruction; the repeated/new ratio is measured in the same run. In-process, the main
process's cost per 640x480 JPEG frame (base64 + decode, hash, resize + normalise) is timed
through the same `ImagePipeline` the server uses.

    python -m vla_server.bench multimodal [--rounds 20] [--model-path DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from PIL import Image

from vla_server.bench.stats import plot_distributions, summary_ms, table, write_json
from vla_server.bench.stream_client import StreamTiming, timed_stream
from vla_server.multimodal.image_input import MediaPolicy, load_image
from vla_server.multimodal.image_pipeline import ImagePipeline
from vla_server.multimodal.preprocess import preprocess_image
from vla_server.multimodal.preprocess_config import PreprocessConfig
from vla_server.server_subprocess import ServerProcess, run_server

INSTRUCTIONS = (
    "What action should the robot take to pick up the red block?",
    "What action should the robot take to open the drawer?",
)
CASES = ("new frame", "repeated frame", "repeated frame, other instruction")


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model-path", default=None, help="an HF LLaVA folder (default: the demo)")
    p.add_argument("--rounds", type=int, default=20, help="new/repeated frame rounds (served)")
    p.add_argument("--frames", type=int, default=100, help="frames timed in-process")
    p.add_argument("--width", type=int, default=640)
    p.add_argument("--height", type=int, default=480)
    p.add_argument("--jpeg-quality", type=int, default=90)
    p.add_argument("--num-actions", type=int, default=1, help="actions per served request")
    p.add_argument("--unnorm-key", default=None, help="default: the model's first key")
    p.add_argument("--torch-threads", type=int, default=None, help="the server's model threads")
    p.add_argument("--server-args", nargs=argparse.REMAINDER, default=[], help="extra serve flags")
    p.add_argument("--out", type=Path, default=Path("bench_out/multimodal"))


def camera_frames(n: int, width: int, height: int, quality: int, seed: int) -> list[str]:
    """`n` distinct camera-like frames (smooth scene, sensor noise, a moving object) as base64
    JPEG, the form an HTTP client sends."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    scene = np.stack([x / width * 200, y / height * 180, (x + y) / (width + height) * 160], -1)
    frames = []
    for i in range(n):
        frame = scene + rng.normal(0.0, 6.0, scene.shape)
        cx, cy = (37 * i) % (width - 80), (23 * i) % (height - 80)
        frame[cy : cy + 80, cx : cx + 80] = rng.integers(0, 256, 3)
        buffer = io.BytesIO()
        image = Image.fromarray(np.clip(frame, 0, 255).astype(np.uint8))
        image.save(buffer, "JPEG", quality=quality)
        frames.append(base64.b64encode(buffer.getvalue()).decode())
    return frames


def clock(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


def pipeline_costs(model_path: Path, frames: list[str]) -> dict[str, list[float]]:
    """Seconds per frame of the main process's image work, whole and by stage."""
    pipeline = ImagePipeline(MediaPolicy(), PreprocessConfig.from_folder(model_path))
    stages = ("total (ImagePipeline.process)", "base64 + JPEG decode", "hash", "resize + normalise")
    costs: dict[str, list[float]] = {name: [] for name in stages}
    for frame in frames[:3]:  # warm-up: the first PIL/numpy calls load code
        pipeline.process([frame])
    for frame in frames:
        total, _ = clock(lambda f=frame: pipeline.process([f]))
        decode, pixels = clock(lambda f=frame: load_image(f, 0, pipeline.policy))
        hashing, _ = clock(lambda p=pixels: pipeline.hash_pixels(p))
        resize, _ = clock(lambda p=pixels: preprocess_image(p, pipeline.preprocess))
        for name, seconds in zip(stages, (total, decode, hashing, resize), strict=True):
            costs[name].append(seconds)
    return costs


def unnorm_key(server: ServerProcess, wanted: str | None) -> str | None:
    actions = httpx.get(server.url + "/get_model_info", timeout=30).json().get("actions")
    if actions is None:
        raise SystemExit("the model has no action tokenizer: time-to-first-action needs one")
    return wanted or (actions["unnorm_keys"] or [None])[0]


def mm_cache_counts(server: ServerProcess) -> dict[str, int]:
    cache = httpx.get(server.url + "/get_server_info", timeout=30).json()["mm"]["embedding_cache"]
    return {"hits": cache["hits"], "misses": cache["misses"]}


def request_body(frame: str, instruction: str, key: str | None, num_actions: int) -> dict:
    return {
        "text": instruction,
        "image_data": frame,
        "num_actions": num_actions,
        "unnorm_key": key,
        "sampling_params": {"temperature": 0},
    }


async def served_rounds(
    server: ServerProcess, frames: list[str], key: str | None, num_actions: int
) -> dict[str, list[StreamTiming]]:
    """Per frame, one stream at a time: the new frame, then the same frame twice more."""
    out: dict[str, list[StreamTiming]] = {case: [] for case in CASES}
    prompts = (INSTRUCTIONS[0], INSTRUCTIONS[0], INSTRUCTIONS[1])
    async with httpx.AsyncClient(base_url=server.url, timeout=600) as client:
        for frame in frames:
            for case, instruction in zip(CASES, prompts, strict=True):
                body = request_body(frame, instruction, key, num_actions)
                out[case].append(await timed_stream(client, body))
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    from vla_server.model.demo import demo_model_path

    path = Path(args.model_path) if args.model_path else demo_model_path()
    shape = (args.width, args.height, args.jpeg_quality)
    print(f"model {path}; timing {args.frames} {args.width}x{args.height} JPEG frames ...")
    costs = pipeline_costs(path, camera_frames(args.frames, *shape, seed=1))
    frames = camera_frames(args.rounds + 3, *shape, seed=2)
    flags = list(args.server_args)
    if args.torch_threads:
        flags += ["--torch-num-threads", str(args.torch_threads)]
    with run_server(path, Path(tempfile.mkdtemp(prefix="vla-bench-mm-")), *flags) as server:
        key = unnorm_key(server, args.unnorm_key)
        asyncio.run(served_rounds(server, frames[args.rounds :], key, args.num_actions))  # warm-up
        before = mm_cache_counts(server)
        print(f"served: {args.rounds} rounds x {len(CASES)} requests, unnorm_key {key} ...")
        measured = frames[: args.rounds]
        served = asyncio.run(served_rounds(server, measured, key, args.num_actions))
        after = mm_cache_counts(server)
    cache = {k: after[k] - before[k] for k in before}
    return report(args, path, served, costs, cache)


def served_rows(served: dict[str, list[StreamTiming]]) -> list[dict[str, Any]]:
    rows = []
    for case, timings in served.items():
        ttft = summary_ms([t.ttft for t in timings])
        ttfa = summary_ms([t.actions_at[0] for t in timings if t.actions_at])
        cached = [t.last["meta_info"]["cached_tokens"] for t in timings if t.last]
        rows.append(
            {
                "case": case,
                "n": len(timings),
                "ttft_p50": ttft["p50"],
                "ttft_p90": ttft["p90"],
                "ttft_p99": ttft["p99"],
                "ttfa_p50": ttfa["p50"],
                "ttfa_p90": ttfa["p90"],
                "ttfa_p99": ttfa["p99"],
                "cached_tokens_p50": float(np.median(cached)) if cached else float("nan"),
            }
        )
    new = rows[0]
    for row in rows[1:]:
        row["ttft_ratio_p50"] = row["ttft_p50"] / new["ttft_p50"]
        row["ttfa_ratio_p50"] = row["ttfa_p50"] / new["ttfa_p50"]
    return rows


def report(
    args: argparse.Namespace,
    path: Path,
    served: dict[str, list[StreamTiming]],
    costs: dict[str, list[float]],
    cache: dict[str, int],
) -> dict[str, Any]:
    rows = served_rows(served)
    stages = [{"stage": name, **summary_ms(values)} for name, values in costs.items()]
    print(f"\nmodel {path.name}: one stream at a time, {args.num_actions} action(s) per request")
    print("TTFT / time-to-first-action in ms; ratio = case p50 / new-frame p50 (same run)")
    cols = ["case", "n", "ttft_p50", "ttft_p90", "ttft_p99", "ttfa_p50", "ttfa_p90", "ttfa_p99"]
    print(table(rows, [*cols, "ttft_ratio_p50", "ttfa_ratio_p50", "cached_tokens_p50"]))
    print(
        f"embedding cache over the measured rounds: {cache['hits']} hits, {cache['misses']} misses"
    )
    print(f"\nmain-process cost per {args.width}x{args.height} JPEG frame (ms, in-process)")
    print(table(stages, ["stage", "n", "p50", "p90", "p99", "mean"]))
    result = {
        "model": str(path),
        "frame": {"width": args.width, "height": args.height, "jpeg_quality": args.jpeg_quality},
        "num_actions": args.num_actions,
        "served": rows,
        "embedding_cache": cache,
        "pipeline_ms": stages,
    }
    write_json(args.out / f"multimodal-{path.name}.json", result)
    series: dict[str, list[float]] = {}
    for case, timings in served.items():
        series[f"TTFT, {case}"] = [t.ttft for t in timings]
        series[f"TTFA, {case}"] = [t.actions_at[0] for t in timings if t.actions_at]
    series["JPEG frame: ImagePipeline.process"] = costs["total (ImagePipeline.process)"]
    plot_distributions(
        args.out / f"multimodal-{path.name}.png", f"new vs repeated frame: {path.name}", series
    )
    print(f"wrote {args.out}/multimodal-{path.name}.json and .png")
    return result
