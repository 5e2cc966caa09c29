"""Benchmarks users already know, against a demo node: `python -m sglang.bench_serving` and
`guidellm benchmark`. Not in CI.

It builds its own venv (on top of this interpreter's packages: torch and transformers are not
installed twice) under --out, installs the bare `sglang` wheel without its dependencies (they
pull CUDA kernels and another torch; bench_serving needs only the few listed in SGLANG_NEEDS)
and `guidellm==0.8.1`, starts a demo node on a free loopback port, runs both tools against it
and prints their tables.

    python -m vla_server.bench ecosystem [--num-prompts 32] [--input-len 64] [--output-len 32]
"""

from __future__ import annotations

import argparse
import site
import subprocess
import sys
import venv
from pathlib import Path
from typing import Any

from vla_server.model.demo import demo_model_path
from vla_server.server_subprocess import running_server

SGLANG = "sglang==0.5.23"
GUIDELLM = "guidellm==0.8.1"
# What `sglang.bench_serving` imports beyond this interpreter's packages (read from its source).
SGLANG_NEEDS = ("aiohttp", "orjson", "requests", "pybase64", "datasets", "IPython")


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--num-prompts", type=int, default=32)
    p.add_argument("--input-len", type=int, default=64)
    p.add_argument("--output-len", type=int, default=32)
    p.add_argument("--out", type=Path, default=Path("bench_out/ecosystem"))


def _run(cmd: list[str], **kw: Any) -> None:
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, **kw)


def build_venv(where: Path) -> Path:
    """The venv's python, with sglang (no deps) + bench_serving's needs, and guidellm."""
    python = where / "bin" / "python"
    if not python.exists():
        venv.create(where, with_pip=True)
        # This interpreter's packages (torch, transformers, psutil, ...) below the venv's own:
        # `system_site_packages` would give the base interpreter's, not this venv's.
        purelib = subprocess.check_output(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], text=True
        ).strip()
        Path(purelib, "vla_server_parent.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    pip = [str(python), "-m", "pip", "install", "-q"]
    _run([*pip, "--no-deps", SGLANG])
    _run([*pip, *SGLANG_NEEDS, GUIDELLM])
    return python


def bench_serving(python: Path, url: str, model: str, args: argparse.Namespace) -> None:
    """SGLang's own serving benchmark on random token ids (no dataset download)."""
    host, port = url.removeprefix("http://").split(":")
    _run(
        [
            *(str(python), "-m", "sglang.bench_serving", "--backend", "sglang"),
            *("--host", host, "--port", port, "--model", model, "--tokenizer", model),
            *("--dataset-name", "random-ids", "--num-prompts", str(args.num_prompts)),
            *("--random-input-len", str(args.input_len), "--random-output-len"),
            *(str(args.output_len), "--random-range-ratio", "1.0"),
        ]
    )


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
        ]
    )


def run(args: argparse.Namespace) -> None:
    args.out.mkdir(parents=True, exist_ok=True)
    python = build_venv(args.out / "venv")
    model = str(demo_model_path())
    with running_server(model, log_path=args.out / "node.log") as node:
        print(f"node {node.url} (log {args.out / 'node.log'})", flush=True)
        for tool in (bench_serving, guidellm):
            try:
                tool(python, node.url, model, args)
            except subprocess.CalledProcessError as e:
                print(f"{tool.__name__} failed with exit code {e.returncode}", file=sys.stderr)
        # What the tools called and how the node answered (route, status, count).
        for line in node.client().get("/metrics").text.splitlines():
            if line.startswith("vla_http_requests_total{"):
                print(line)
