"""Benchmarks users already know, against a demo node: SGLang's `bench_serving` (its `sglang`
and `sglang-oai-chat` backends), `guidellm` and `genai-bench`. Not in CI.

It builds its own venv under --out, apart from this interpreter's: SGLang 0.5.23 imports
torchvision, whose PyPI build does not load next to this project's CPU torch 2.13, so the venv
takes SGLang's own `torch==2.14.1` + `torchvision==0.29.1` and the bare `sglang` wheel with only
the modules `bench_serving` imports (its full dependency list pulls CUDA kernels), plus
`guidellm==0.8.1` and `genai-bench==0.0.5`. Then it starts a demo node on a free loopback port,
runs each tool against it and prints their tables.

With `--capture DIR` each tool runs once more, briefly, through a recording proxy (and
sglang-router 0.3.2 is driven through one too); the distinct request bodies they sent are written
to DIR/<tool>.json, the fixtures of tests/integration/test_client_replay.py.

    python -m vla_server.bench ecosystem [--num-prompts 32] [--input-len 64] [--output-len 32]
        [--capture tests/fixtures/client_requests]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import venv
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vla_harness.server_subprocess import running_server
from vla_server.bench.capture_proxy import capturing
from vla_server.bench.client_fixtures import drive_router, write_fixtures
from vla_server.policies.llava.demo import demo_model_path

TOOLS = ("sglang==0.5.23", "guidellm==0.8.1", "genai-bench==0.0.5")
# SGLang's own torch pins, and what `sglang.bench_serving` imports beyond the tools' own
# dependencies (found by importing it in a fresh venv until it loaded).
SGLANG_NEEDS = (
    *("torch==2.14.1", "torchvision==0.29.1", "transformers==5.19.0"),
    *("aiohttp", "orjson", "requests", "pybase64", "datasets", "IPython", "starlette"),
    *("msgspec", "apache-tvm-ffi==0.1.11", "sentencepiece", "compressed-tensors", "gguf"),
)
# The node's own flags: the robot defaults a fleet node runs with (see README, "A fleet").
NODE_FLAGS = ("--default-num-actions", "2", "--default-unnorm-key", "demo_arm")


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--num-prompts", type=int, default=32)
    p.add_argument("--input-len", type=int, default=64)
    p.add_argument("--output-len", type=int, default=32)
    p.add_argument("--out", type=Path, default=Path("bench_out/ecosystem"))
    p.add_argument("--capture", type=Path, default=None, help="write the tools' bodies here")


def _run(cmd: list[str], **kw: Any) -> None:
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, **kw)


def build_venv(where: Path) -> Path:
    """The venv's python, with the three tools (built once; later runs reuse it)."""
    python = where / "bin" / "python"
    if not (where / "bin" / "genai-bench").exists():
        venv.create(where, with_pip=True)
        pip = [str(python), "-m", "pip", "install", "-q"]
        _run([*pip, *SGLANG_NEEDS, *TOOLS[1:]])
        _run([*pip, "--no-deps", TOOLS[0]])
    return python


def bench_serving(backend: str) -> Callable[..., None]:
    """SGLang's own serving benchmark on random token ids (no dataset download)."""

    def tool(python: Path, url: str, model: str, args: argparse.Namespace) -> None:
        host, port = url.removeprefix("http://").split(":")
        _run(
            [
                *(str(python), "-m", "sglang.bench_serving", "--backend", backend),
                *("--host", host, "--port", port, "--model", model, "--tokenizer", model),
                *("--dataset-name", "random-ids", "--num-prompts", str(args.num_prompts)),
                *("--random-input-len", str(args.input_len), "--random-output-len"),
                *(str(args.output_len), "--random-range-ratio", "1.0"),
            ],
            cwd=args.out,
        )

    tool.__name__ = f"bench_serving_{backend.replace('-', '_')}"
    return tool


def guidellm(python: Path, url: str, model: str, args: argparse.Namespace) -> None:
    """guidellm (0.8's `kind=...` options) over the OpenAI routes, 4 concurrent streams."""
    data = f"kind=synthetic_text,prompt_tokens={args.input_len},output_tokens={args.output_len}"
    _run(
        [
            *(str(python.parent / "guidellm"), "run"),
            *("--backend", f"kind=openai_http,target={url},model={model}"),
            *("--tokenizer", f"kind=huggingface_auto,model={model}"),
            *("--profile", "kind=concurrent,streams=4", "--data", data),
            *("--constraint", f"kind=max_requests,count={args.num_prompts}"),
            *("--output", "kind=console", "--disable-console-interactive"),
        ],
        cwd=args.out,
    )


def genai_bench(python: Path, url: str, model: str, args: argparse.Namespace) -> None:
    """genai-bench with its `sglang` backend (chat, streamed), 4 concurrent users."""
    _run(
        [
            *(str(python.parent / "genai-bench"), "benchmark", "--api-backend", "sglang"),
            *("--api-base", url, "--api-key", "none", "--api-model-name", model),
            *("--model-tokenizer", model, "--task", "text-to-text", "--num-concurrency", "4"),
            *("--traffic-scenario", f"D({args.input_len},{args.output_len})"),
            *("--max-requests-per-run", str(args.num_prompts), "--max-time-per-run", "5"),
            *("--experiment-base-dir", str(args.out / "genai-bench"), "--server-engine", "SGLang"),
        ],
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        cwd=args.out,
    )


BENCHES = (bench_serving("sglang"), bench_serving("sglang-oai-chat"), guidellm, genai_bench)


def _bench(python: Path, url: str, model: str, args: argparse.Namespace) -> None:
    for tool in BENCHES:
        try:
            tool(python, url, model, args)
        except subprocess.CalledProcessError as e:
            print(f"{tool.__name__} failed with exit code {e.returncode}", file=sys.stderr)


def _capture(python: Path, url: str, model: str, args: argparse.Namespace) -> None:
    """Each tool once more, briefly, through a recording proxy; then the fixtures."""
    raw = args.out / "captured"
    raw.mkdir(parents=True, exist_ok=True)
    short = argparse.Namespace(**{**vars(args), "num_prompts": 4, "output_len": 8})
    for tool in BENCHES:
        sink = raw / f"{tool.__name__}.jsonl"
        sink.unlink(missing_ok=True)
        with capturing(url, sink) as proxy:
            tool(python, proxy, model, short)
    sink = raw / "sglang_router.jsonl"
    sink.unlink(missing_ok=True)
    with capturing(url, sink) as proxy:
        drive_router(proxy, model, args.out / "router.log")
    write_fixtures(raw, args.capture)


def run(args: argparse.Namespace) -> None:
    args.out = args.out.resolve()  # the tools run there, and write their result files there
    args.out.mkdir(parents=True, exist_ok=True)
    python = build_venv(args.out / "venv")
    model = str(demo_model_path())
    log = args.out / "node.log"
    with running_server(model, extra=NODE_FLAGS, log_path=log) as node:
        print(f"node {node.url} (log {log})", flush=True)
        _bench(python, node.url, model, args)
        if args.capture is not None:
            _capture(python, node.url, model, args)
        # What the tools called and how the node answered (route, status, count).
        for line in node.client().get("/metrics").text.splitlines():
            if line.startswith("vla_http_requests_total{"):
                print(line)
