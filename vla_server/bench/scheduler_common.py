"""Shared pieces of the scheduler benchmarks: options, servers, request bodies, report output."""

from __future__ import annotations

import argparse
import contextlib
import random
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from vla_harness.server_subprocess import ServerProcess, run_server
from vla_harness.stats import plot_distributions, summary_ms, table, write_json
from vla_server.bench.checkpoints import SIZES
from vla_server.bench.serving import model_path
from vla_server.bench.stream_client import StreamTiming
from vla_server.config import default_torch_threads


def add_common_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="medium", choices=["demo", *SIZES])
    p.add_argument("--model-path", default=None, help="an HF checkpoint folder (overrides --model)")
    p.add_argument(
        "--torch-threads",
        type=int,
        default=None,
        help="torch threads of the model, in-process and in the servers (default: the server's)",
    )
    p.add_argument(
        "--max-total-tokens", type=int, default=16384, help="KV pool of each server, in tokens"
    )
    p.add_argument("--server-args", nargs=argparse.REMAINDER, default=[], help="extra serve flags")
    p.add_argument("--out", type=Path, default=Path("bench_out/scheduler"))


@dataclass
class BenchSetup:
    path: Path
    threads: int
    max_total_tokens: int
    logs: Path
    out: Path
    extra_flags: list[str]

    @property
    def name(self) -> str:
        return self.path.name


def setup(args: argparse.Namespace) -> BenchSetup:
    """Same torch thread count in this process (raw step) and in the servers: the ratio of
    served to raw time is only meaningful at equal threads."""
    threads = args.torch_threads or default_torch_threads()
    torch.set_num_threads(threads)
    path = Path(args.model_path) if args.model_path else model_path(args.model)
    logs = Path(tempfile.mkdtemp(prefix="vla-bench-sched-"))
    print(f"model {path}, torch threads {threads}, server logs in {logs}", flush=True)
    return BenchSetup(path, threads, args.max_total_tokens, logs, args.out, args.server_args)


@contextlib.contextmanager
def serve(bench: BenchSetup, *flags: str) -> Iterator[ServerProcess]:
    print(f"starting a server with {' '.join(flags) or 'default flags'} ...", flush=True)
    common = ["--torch-num-threads", str(bench.threads)]
    common += ["--max-total-tokens", str(bench.max_total_tokens)]
    with run_server(bench.path, bench.logs, *common, *flags, *bench.extra_flags) as server:
        yield server


def prompt_ids(n: int, seed: int) -> list[int]:
    """`n` token ids drawn from a seeded generator: prompts of different seeds share no prefix
    (beyond chance on the first token), so the radix cache cannot serve one from another."""
    rng = random.Random(seed)
    return [rng.randrange(10, 250) for _ in range(n)]


def gen_body(ids: list[int], max_new_tokens: int, **fields: Any) -> dict[str, Any]:
    return {
        "input_ids": ids,
        "sampling_params": {
            "max_new_tokens": max_new_tokens,
            "temperature": 0,
            "ignore_eos": True,
        },
        **fields,
    }


def itls(timings: Sequence[StreamTiming]) -> list[float]:
    return [x for t in timings for x in t.itls]


def ttfts(timings: Sequence[StreamTiming]) -> list[float]:
    return [t.ttft for t in timings]


def latency_cols(prefix: str, values: Sequence[float]) -> dict[str, float]:
    s = summary_ms(values)
    out = {f"{prefix}_{k}": s[k] for k in ("p50", "p99", "mean")}
    out[f"{prefix}_max"] = max(values) * 1e3 if len(values) else float("nan")
    return out


def source_state() -> dict[str, Any]:
    """The commit the numbers belong to, and the package files modified on top of it."""

    def git(*cmd: str) -> str:
        root = Path(__file__).resolve().parents[2]
        done = subprocess.run(["git", *cmd], cwd=root, capture_output=True, text=True)
        return done.stdout.strip()

    return {
        "commit": git("rev-parse", "HEAD"),
        "modified": git("status", "--porcelain", "--", "vla_server").splitlines(),
    }


def save_report(
    bench: BenchSetup,
    stem: str,
    title: str,
    rows: list[dict[str, Any]],
    result: dict[str, Any],
    series: dict[str, Sequence[float]],
) -> None:
    """Print the table (all columns of the rows, in order), write JSON and the CDF plot."""
    columns = list(dict.fromkeys(k for r in rows for k in r))
    print(f"\n{title}\nmodel {bench.name}, torch threads {bench.threads}; latencies in ms")
    print(table(rows, columns))
    base = bench.out / f"{stem}-{bench.name}"
    record = {"model": str(bench.path), "rows": rows, "source": source_state()}
    record |= {"server_args": bench.extra_flags, **result}  # what the run's servers were given
    write_json(base.with_suffix(".json"), record)
    plot_distributions(base.with_suffix(".png"), f"{title}: {bench.name}", series)
    print(f"wrote {base}.json and .png", flush=True)
