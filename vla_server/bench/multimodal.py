"""Multimodal benchmark: TTFT and time-to-first-action for a new camera frame vs a repeated one,
served from the prefix cache and from the embedding cache.

Through the HTTP server on the demo VLA (or --model-path, or --tiny NAME), one stream at a time,
with the prompt the checkpoint's family writes for a plain image request (`PromptLayout`). The
demo's puts the instruction before the image (`In: <instruction>\n<image>\nOut:`), so each
round measures:

* new frame: the vision tower encodes it (the instruction's prefix KV is reused);
* repeated frame, same prompt: the radix prefix cache holds every image position, so neither the
  vision tower nor the image prefill runs;
* repeated frame, other instruction: the text before the image differs, so no prefix covers it;
  the embedding cache skips the vision tower but the image positions are prefilled.

A layout whose images lead the prompt (right after BOS) keeps every image position in the prefix
cache under another instruction too. A prefix-LM checkpoint (cameras first, the whole prompt
attended bidirectionally) reuses KV only for an identical prompt: the repeated frame with the
same prompt is a full prefix hit, with another instruction only the embedding cache helps; if its
actions are a token chunk decoded at once, its time to first action is the time to the chunk.
Where the family has a reference implementation (`PolicyFamily.reference_predict`), the same
frames and prompts also run through it, timed in its own process.

Ratios are repeated/new in the same run; each request's image is checked against the node's own
counts (`/get_server_info` mm.embedding_cache.images: prefix_cache, embedding_cache,
vision_tower). In-process, the main process's cost per 640x480 JPEG frame (base64 + decode,
hash, resize + normalise) is timed through the same `ImagePipeline` the server uses, by stage.

    python -m vla_server.bench multimodal [--rounds 20] [--model-path DIR | --tiny NAME]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from PIL import Image

from vla_frames.image_decode import as_pixels
from vla_frames.image_hash import format_mm_hash
from vla_harness.server_subprocess import ServerProcess, run_server
from vla_harness.stats import plot_distributions, summary_ms, table, write_json
from vla_server.bench.multimodal_reference import REFERENCE_COLUMNS, reference_rounds
from vla_server.bench.stream_client import StreamTiming, timed_stream
from vla_server.config import default_torch_threads
from vla_server.metrics import MM_IMAGE_SOURCES as SOURCES
from vla_server.multimodal.image_input import MediaPolicy, load_frame
from vla_server.multimodal.image_pipeline import ImagePipeline
from vla_server.multimodal.preprocessor import ImagePreprocessor
from vla_server.policies.base import PromptLayout
from vla_server.policies.llava.family import PROMPT_LAYOUT as DEMO_LAYOUT
from vla_server.policies.registry import detect, tiny_checkpoint


@dataclass(frozen=True)
class Layout:
    """A family's prompt layout, and so which cache serves each case."""

    prompt: str  # with {instruction}
    instructions: tuple[str, ...]
    cases: dict[str, tuple[int, str]]  # case -> (instruction index, the source it must report)
    cameras: int = 1  # images per request
    extra: dict[str, Any] = field(default_factory=dict)  # more request fields

    @classmethod
    def of(cls, prompt: PromptLayout) -> Layout:
        other = "prefix_cache" if prompt.images_lead else "embedding_cache"
        cases = {
            "new frame": (0, "vision_tower"),
            "repeated frame, same prompt": (0, "prefix_cache"),
            "repeated frame, other instruction": (1, other),
        }
        return cls(prompt.prompt, prompt.instructions, cases, prompt.cameras, prompt.extra)


DEFAULT_LAYOUT = Layout.of(DEMO_LAYOUT)


def layout_of(model_path: Path) -> Layout:
    prompt = detect(model_path).prompt_layout()
    if prompt is None:
        raise SystemExit(
            f"{model_path}: its family writes no plain image prompt (a denoising policy's "
            "chunks are timed by `python -m vla_server.bench flow`)"
        )
    return Layout.of(prompt)


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model-path", default=None, help="an HF LLaVA folder (default: the demo)")
    p.add_argument(
        "--tiny", default=None, help="a tiny checkpoint by name (bench flow --tiny list)"
    )
    p.add_argument("--rounds", type=int, default=20, help="new/repeated frame rounds (served)")
    p.add_argument("--warmup-rounds", type=int, default=3, help="served rounds not measured")
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
    """Seconds per frame of the main process's image work, whole and by stage, on both image
    backends: with PIL's, the decoded PIL image goes straight to the resize and the pixel array
    is made for the server's own hash only (a raw-pixel client's array is converted to PIL for the
    resize); with torch's, that one array is hashed and resized."""
    pipelines = [
        ImagePipeline(MediaPolicy(), _preprocessor(model_path, backend))
        for backend in ("pil", "torch")
    ]
    costs: dict[str, list[float]] = {name: [] for name in PIPELINE_STAGES}
    for frame in frames[:3]:  # warm-up: the first PIL/numpy/torch calls load code
        for pipeline in pipelines:
            pipeline.process([frame])
    for frame in frames:
        for name, seconds in _frame_costs(*pipelines, frame).items():
            costs[name].append(seconds)
    return costs


TORCH_TOTAL_STAGE = "total, --image-backend torch"
PIPELINE_STAGES = (
    "total (ImagePipeline.process)",
    "total, caller mm_hashes",
    "base64 + JPEG decode",
    "pixel array (server hash only)",
    "hash",
    "resize + normalise",
    "resize + normalise from an array",
    TORCH_TOTAL_STAGE,
    "torch backend: resize + normalise from the array",
)


def _frame_costs(
    pipeline: ImagePipeline, torch_pipeline: ImagePipeline, frame: str
) -> dict[str, float]:
    caller = format_mm_hash(0)
    total, _ = clock(lambda: pipeline.process([frame]))
    with_hash, _ = clock(lambda: pipeline.process([frame], [caller]))
    decode, decoded = clock(lambda: load_frame(frame, 0, pipeline.policy))
    to_array, pixels = clock(lambda: as_pixels(decoded))
    hashing, _ = clock(lambda: pipeline.hash_pixels(pixels))
    resize, _ = clock(lambda: pipeline.preprocess.apply(decoded))
    from_array, _ = clock(lambda: pipeline.preprocess.apply(pixels))
    torch_total, _ = clock(lambda: torch_pipeline.process([frame]))
    torch_resize, _ = clock(lambda: torch_pipeline.preprocess.apply(pixels))
    seconds = (total, with_hash, decode, to_array, hashing, resize, from_array, torch_total,
               torch_resize)  # fmt: skip
    return dict(zip(PIPELINE_STAGES, seconds, strict=True))


def unnorm_key(server: ServerProcess, wanted: str | None) -> str | None:
    actions = httpx.get(server.url + "/get_model_info", timeout=30).json().get("actions")
    if actions is None:
        raise SystemExit("the model has no action tokenizer: time-to-first-action needs one")
    return wanted or (actions.get("unnorm_keys") or [None])[0]


async def image_sources(client: httpx.AsyncClient) -> dict[str, int]:
    """The node's cumulative image counts by where the embeddings came from."""
    info = (await client.get("/get_server_info")).json()
    images = info["mm"]["embedding_cache"]["images"]
    return {source: images[source] for source in SOURCES}


def request_body(
    frame: str | list[str],
    instruction: str,
    key: str | None,
    num_actions: int,
    layout: Layout = DEFAULT_LAYOUT,
) -> dict:
    return {
        "text": layout.prompt.format(instruction=instruction),
        "image_data": frame,
        "num_actions": num_actions,
        "unnorm_key": key,
        "sampling_params": {"temperature": 0},
        **layout.extra,
    }


@dataclass
class CaseRuns:
    timings: list[StreamTiming] = field(default_factory=list)
    sources: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SOURCES, 0))


async def served_rounds(
    server: ServerProcess,
    frames: list[str] | list[list[str]],
    key: str | None,
    num_actions: int,
    layout: Layout,
) -> dict[str, CaseRuns]:
    """Per frame, one stream at a time: the new frame, then the same frame twice more. The
    node's image counts are read between requests (outside the timed streams)."""
    out = {case: CaseRuns() for case in layout.cases}
    async with httpx.AsyncClient(base_url=server.url, timeout=600) as client:
        for frame in frames:
            for case, (which, _) in layout.cases.items():
                before = await image_sources(client)
                instruction = layout.instructions[which]
                body = request_body(frame, instruction, key, num_actions, layout)
                out[case].timings.append(await timed_stream(client, body))
                after = await image_sources(client)
                for source in SOURCES:
                    out[case].sources[source] += after[source] - before[source]
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    from vla_server.policies.llava.demo import demo_model_path

    path = _model_path(args) or demo_model_path()
    layout = layout_of(path)
    shape = (args.width, args.height, args.jpeg_quality)
    print(f"model {path}; timing {args.frames} {args.width}x{args.height} JPEG frames ...")
    costs = pipeline_costs(path, camera_frames(args.frames, *shape, seed=1))
    frames = _rounds(camera_frames((args.rounds + args.warmup_rounds) * layout.cameras, *shape,
                                   seed=2), layout.cameras)  # fmt: skip
    flags = list(args.server_args)
    if args.torch_threads:
        flags += ["--torch-num-threads", str(args.torch_threads)]
    with run_server(path, Path(tempfile.mkdtemp(prefix="vla-bench-mm-")), *flags) as server:
        key = unnorm_key(server, args.unnorm_key)
        warmup = frames[args.rounds :]
        asyncio.run(served_rounds(server, warmup, key, args.num_actions, layout))
        print(f"served: {args.rounds} rounds x {len(layout.cases)} requests, unnorm_key {key} ...")
        measured = frames[: args.rounds]
        served = asyncio.run(served_rounds(server, measured, key, args.num_actions, layout))
    reference = None
    reference_predict = detect(path).reference_predict()
    if reference_predict is not None:
        threads = args.torch_threads or default_torch_threads()  # the server's model threads
        cases = {case: layout.instructions[which] for case, (which, _) in layout.cases.items()}
        timings = {case: runs.timings for case, runs in served.items()}
        reference = reference_rounds(
            reference_predict, path, measured, key, cases, timings, threads
        )
    return report(args, path, layout, served, costs, reference)


def _model_path(args: argparse.Namespace) -> Path | None:
    if args.tiny:
        try:
            return tiny_checkpoint(args.tiny)
        except ValueError as e:
            raise SystemExit(str(e)) from e
    return Path(args.model_path) if args.model_path else None


def _rounds(frames: list[str], cameras: int) -> list[str] | list[list[str]]:
    """One request's images per round: a frame, or `cameras` of them."""
    if cameras == 1:
        return frames
    return [frames[i : i + cameras] for i in range(0, len(frames), cameras)]


def _ratio(value: float, base: float) -> float:
    return value / base if base else float("nan")


def case_row(case: str, runs: CaseRuns, layout: Layout = DEFAULT_LAYOUT) -> dict[str, Any]:
    """TTFT and time-to-first-action percentiles of one case, and the image sources the node
    counted for its requests against the one the case must hit."""
    timings = runs.timings
    ttft = summary_ms([t.ttft for t in timings])
    ttfa = summary_ms([t.actions_at[0] for t in timings if t.actions_at])
    cached = [t.last["meta_info"]["cached_tokens"] for t in timings if t.last]
    expected = layout.cases[case][1]
    return {
        "case": case,
        "n": len(timings),
        **{f"ttft_{q}": ttft[q] for q in ("p50", "p90", "p99")},
        **{f"ttfa_{q}": ttfa[q] for q in ("p50", "p90", "p99")},
        "cached_tokens_p50": float(np.median(cached)) if cached else float("nan"),
        "expected_source": expected,
        "sources": dict(runs.sources),
        "sources_as_expected": runs.sources
        == {s: len(timings) * layout.cameras if s == expected else 0 for s in SOURCES},
    }


def served_rows(
    served: dict[str, CaseRuns], layout: Layout = DEFAULT_LAYOUT
) -> list[dict[str, Any]]:
    """One row per case; the repeated cases also get their P50/P99 ratios to the new frame."""
    rows = [case_row(case, runs, layout) for case, runs in served.items()]
    new = rows[0]
    for row in rows[1:]:
        for metric in ("ttft", "ttfa"):
            for q in ("p50", "p99"):
                row[f"{metric}_ratio_{q}"] = _ratio(row[f"{metric}_{q}"], new[f"{metric}_{q}"])
    return rows


def report(
    args: argparse.Namespace,
    path: Path,
    layout: Layout,
    served: dict[str, CaseRuns],
    costs: dict[str, list[float]],
    reference: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    rows = served_rows(served, layout)
    stages = [{"stage": name, **summary_ms(values)} for name, values in costs.items()]
    print(f"\nmodel {path.name}: one stream at a time, {args.num_actions} action(s) per request")
    print("TTFT / time-to-first-action (TTFA) in ms; ratio = case / new frame (same run)")
    latency = ["case", "n", "ttft_p50", "ttft_p99", "ttfa_p50", "ttfa_p99", "cached_tokens_p50"]
    print(table(rows, latency))
    ratios = [f"{m}_ratio_{q}" for m in ("ttft", "ttfa") for q in ("p50", "p99")]
    print(table(rows[1:], ["case", *ratios]))
    print("\nimages by source as the node counted them (/get_server_info), per case:")
    for row in rows:
        verdict = "as expected" if row["sources_as_expected"] else "NOT AS EXPECTED"
        counts = ", ".join(f"{k} {v}" for k, v in row["sources"].items())
        print(f"  {row['case']}: {counts} (expected {row['expected_source']}: {verdict})")
    if reference is not None:
        print("\nthe node vs the family's reference in-process (ms; ratio = reference / node)")
        print(table(reference, REFERENCE_COLUMNS))
    print(f"\nmain-process cost per {args.width}x{args.height} JPEG frame (ms, in-process)")
    print(table(stages, ["stage", "n", "p50", "p90", "p99", "mean"]))
    result = {
        "model": str(path),
        "prompt": layout.prompt,
        "frame": {"width": args.width, "height": args.height, "jpeg_quality": args.jpeg_quality},
        "num_actions": args.num_actions,
        "served": rows,
        "pipeline_ms": stages,
        "reference": reference,
    }
    write_json(args.out / f"multimodal-{path.name}.json", result)
    series: dict[str, list[float]] = {}
    for case, runs in served.items():
        series[f"TTFT, {case}"] = [t.ttft for t in runs.timings]
        series[f"TTFA, {case}"] = [t.actions_at[0] for t in runs.timings if t.actions_at]
    for row in reference or []:
        series[f"reference, {row['case']}"] = row["reference_s"]
    series["JPEG frame: ImagePipeline.process"] = costs["total (ImagePipeline.process)"]
    plot_distributions(
        args.out / f"multimodal-{path.name}.png",
        f"{path.name}: node vs its family's reference"
        if reference
        else f"new vs repeated frame (prefix / embedding cache): {path.name}",
        series,
    )
    print(f"wrote {args.out}/multimodal-{path.name}.json and .png")
    return result


def _preprocessor(model_path: Path, backend: str) -> ImagePreprocessor:
    preprocess = detect(model_path).image_preprocessor(backend)
    if preprocess is None:
        raise SystemExit(f"{model_path} takes no images")
    return preprocess
