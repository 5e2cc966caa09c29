"""SGLang's own action client (its openpi benchmark, `multimodal_gen/benchmarks/bench_*_openpi.py`
of the sglang 0.5.23 wheel) against a node:
its `http`, `http_msgpack` and `openpi_ws` modes, each chunk compared with `/v1/actions`. Not in CI.

The wheel is fetched with pip (`--no-deps`) into --out and the client is loaded from it as it
ships: its payload builders (`build_sglang_payload`, `build_sglang_python_payload`, which its
`http_msgpack` mode sends, `build_sglang_openpi_ws_payload`), its runners (`run_sglang_http`,
`run_sglang_openpi_ws`) and its comparison (`compare_first_actions`). The one thing not loaded
as shipped is the module it takes its msgpack codec from (`entrypoints/action/protocol.py`):
that module imports SGLang's GPU runtime (CUDA kernels, torchvision), so only its four codec
functions are taken from the wheel's source and run. The client's profiles name LIBERO's and
ALOHA's cameras; this one is built from the node's `/v1/actions/metadata` (its cameras, state,
horizon, width), with the client's own image maker and its `--deterministic-noise` draw. Every
mode sends that noise, and `/v1/actions` is asked for the same observation with the same noise.

    python -m vla_server.bench sglang_action [--model-path DIR] [--repeats 4] [--batch-size 2]
        [--tiny NAME] [--capture tests/fixtures/client_requests/sglang_action/FILE.json]

With `--capture FILE` the first request of each mode, on 16x16 frames (fixtures stay small), is
written to FILE as the client's builders and codec make it: the fixture that
tests/integration/test_sglang_action_api.py replays in CI.

Without --model-path the node serves a tiny denoising checkpoint (`--tiny`, built offline).
"""

from __future__ import annotations

import argparse
import ast
import base64
import dataclasses
import importlib.util
import io
import json
import re
import subprocess
import sys
import types
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from vla_harness.server_subprocess import running_server
from vla_server.policies.registry import DEFAULT_DENOISING_TINY, tiny_checkpoint

WHEEL = "sglang==0.5.23"
CLIENT = re.compile(r"sglang/multimodal_gen/benchmarks/bench_\w+_openpi\.py")
CODEC = "sglang/multimodal_gen/runtime/entrypoints/action/protocol.py"
CODEC_MODULE = "sglang.multimodal_gen.runtime.entrypoints.action.protocol"
CODEC_FUNCTIONS = ("pack_numpy_payload", "unpack_numpy_payload", "pack_msgpack", "unpack_msgpack")
MODES = ("http", "http_msgpack", "openpi_ws")


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model-path", default=None, help="checkpoint folder (default: --tiny)")
    p.add_argument("--tiny", default=DEFAULT_DENOISING_TINY, help="a tiny checkpoint's name")
    p.add_argument("--out", type=Path, default=Path("bench_out/sglang_action"))
    p.add_argument("--num-samples", type=int, default=4)
    p.add_argument("--repeats", type=int, default=4)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=2)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--capture", type=Path, default=None, help="write its request bodies here")


def wheel_sources(out: Path) -> tuple[Path, Path]:
    """The client's and the codec's files, from the wheel (downloaded once)."""
    where = out / "wheel"
    wheels = sorted(where.glob("sglang-*.whl"))
    if not wheels:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", WHEEL, "-d", str(where)]
        subprocess.run(cmd, check=True)
        wheels = sorted(where.glob("sglang-*.whl"))
    with zipfile.ZipFile(wheels[-1]) as z:
        client = next(n for n in z.namelist() if CLIENT.fullmatch(n))
        for name in (client, CODEC):
            z.extract(name, where / "src")
    return where / "src" / client, where / "src" / CODEC


def load_client(client: Path, codec: Path) -> types.ModuleType:
    """The client module as shipped, its codec module made of the wheel's four functions."""
    tree = ast.parse(codec.read_text())
    keep = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in CODEC_FUNCTIONS]
    shim = types.ModuleType(CODEC_MODULE)
    shim.__dict__["np"] = np
    exec(compile(ast.Module(keep, []), str(codec), "exec"), shim.__dict__)  # the wheel's code
    sys.modules[CODEC_MODULE] = shim
    spec = importlib.util.spec_from_file_location(client.stem, client)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def served_profile(bench: types.ModuleType, meta: dict[str, Any]) -> Any:
    out = meta["output"]
    return dataclasses.replace(  # one of its own profiles, made the served checkpoint's
        next(iter(bench.PROFILES.values())),
        name="served",
        sglang_model=meta["model"],
        openpi_config="-",
        openpi_checkpoint="-",
        prompt="pick up the block",
        sglang_action_horizon=out["action_horizon"],
        openpi_action_horizon=out["action_horizon"],
        action_dim=out["padded_action_dim"],
        output_action_dim=out["action_dim"],
    )


def observations(bench: types.ModuleType, meta: dict[str, Any], n: int, seed: int) -> list[Any]:
    """The client's observation form for the served cameras and state (its image maker)."""
    rng = np.random.default_rng(seed)
    cameras, state_dim = meta["input"]["image_keys"], meta["input"]["state_dim"]
    return [
        {
            "images": {camera: bench._image(rng) for camera in cameras},
            "state": rng.random(state_dim, dtype=np.float32),
        }
        for _ in range(n)
    ]


def payloads(bench: types.ModuleType, mode: str, profile: Any, obs: list[Any], noise: Any) -> list:
    """What the client's `main` sends in `mode` (its builder per mode, cache and graphs on)."""
    builder = {
        "http": bench.build_sglang_payload,
        "http_msgpack": bench.build_sglang_python_payload,
        "openpi_ws": bench.build_sglang_openpi_ws_payload,
    }[mode]
    knobs = {"num_inference_steps": 10, "prefix_cache": True, "cuda_graph": True, "noise": noise}
    return [builder(profile, o, **knobs) for o in obs]


def _png(image: np.ndarray) -> str:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, "PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def v1_actions(node: Any, profile: Any, obs: Any, noise: np.ndarray) -> dict[str, Any]:
    body = {
        "instruction": profile.prompt,
        "image_data": {camera: _png(image) for camera, image in obs["images"].items()},
        "state": np.asarray(obs["state"], dtype=np.float64).tolist(),
        "noise": noise.tolist(),
    }
    r = node.client().post("/v1/actions", json=body)
    r.raise_for_status()
    return r.json()


def run_mode(bench: types.ModuleType, mode: str, url: str, sent: list, args: Any) -> dict:
    knobs = {"warmup": args.warmup, "repeats": args.repeats, "batch_size": args.batch_size}
    if mode == "openpi_ws":
        return bench.run_sglang_openpi_ws(url, sent, **knobs)
    msgpack = mode == "http_msgpack"
    return bench.run_sglang_http(url, sent, timeout_s=120.0, msgpack=msgpack, **knobs)


def capture(bench: types.ModuleType, meta: dict, profile: Any, noise: Any, to: Path) -> None:
    """The first request of each mode, on small frames, as the client sends it."""
    rng = np.random.default_rng(0)
    cameras, state_dim = meta["input"]["image_keys"], meta["input"]["state_dim"]
    frames = {c: rng.integers(0, 256, (16, 16, 3), dtype=np.uint8) for c in cameras}
    obs = {"images": frames, "state": rng.random(state_dim, dtype=np.float32)}
    records = []
    for mode in MODES:
        payload = payloads(bench, mode, profile, [obs], noise)[0]
        msgpack = mode != "http"
        body = bench.pack_msgpack(payload) if msgpack else json.dumps(payload).encode()
        records.append(
            {
                "tool": f"{WHEEL} {bench.__name__}.py",
                "mode": mode,
                "path": "/openpi/policy" if mode == "openpi_ws" else "/v1/actions/generations",
                "content_type": "application/msgpack" if msgpack else "application/json",
                "body_base64": base64.b64encode(body).decode(),
            }
        )
    to.parent.mkdir(parents=True, exist_ok=True)
    to.write_text(json.dumps(records, indent=1) + "\n")


def run(args: argparse.Namespace) -> None:
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    bench = load_client(*wheel_sources(args.out))
    if args.model_path is None:
        args.model_path = str(tiny_checkpoint(args.tiny))
    with running_server(args.model_path, log_path=args.out / "node.log") as node:
        meta = node.client().get("/v1/actions/metadata").json()
        profile = served_profile(bench, meta)
        obs = observations(bench, meta, args.num_samples, args.seed)
        rng = np.random.default_rng(args.seed + 1)  # the client's --deterministic-noise draw
        noise = rng.standard_normal((profile.sglang_action_horizon, profile.action_dim))
        noise = noise.astype(np.float32)
        expected = v1_actions(node, profile, obs[0], noise)
        if args.capture is not None:
            capture(bench, meta, profile, noise, args.capture)
        report = {}
        for mode in MODES:
            sent = payloads(bench, mode, profile, obs, noise)
            result = run_mode(bench, mode, node.url, sent, args)
            diff = bench.compare_first_actions(result["first_output"], expected)
            report[mode] = {"action_diff_vs_v1_actions": diff, "single": result["single"]}
            report[mode]["batch"] = result["batch"]
    print(json.dumps(report, indent=2, sort_keys=True))
    (args.out / "report.json").write_text(json.dumps(report, indent=2, sort_keys=True))
