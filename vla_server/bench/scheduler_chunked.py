"""A running stream's ITL while long prompts keep arriving, with and without chunked prefill.

One server per `--chunk-sizes` entry (<= 0: whole prompts in one forward), side by side; their
rounds alternate. Each round times the stream alone, then again while another robot sends new
`--prompt-tokens` prompts one after another (a `--prompt-gap` pause after each answer, every
prompt distinct so the radix cache cannot shorten it). Ratio: loaded ITL / the stream's ITL
alone on the same server.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from typing import Any

import httpx

from vla_harness.stats import summary_ms
from vla_server.bench.scheduler_common import (
    BenchSetup,
    add_common_args,
    gen_body,
    itls,
    latency_cols,
    prompt_ids,
    save_report,
    serve,
    setup,
    ttfts,
)
from vla_server.bench.stream_client import StreamTiming, timed_stream

STREAM_PROMPT = prompt_ids(16, seed=3)


def add_args(p: argparse.ArgumentParser) -> None:
    add_common_args(p)
    p.add_argument("--chunk-sizes", type=int, nargs="+", default=[64, 0])
    p.add_argument("--prompt-tokens", type=int, default=600)
    p.add_argument("--prompt-gap", type=float, default=0.5, help="seconds between long prompts")
    p.add_argument("--stream-tokens", type=int, default=48, help="new tokens of the stream")
    p.add_argument("--rounds", type=int, default=2)


async def prompt_robot(
    client: httpx.AsyncClient, args: argparse.Namespace, seed: int, stop: asyncio.Event
) -> list[StreamTiming]:
    out: list[StreamTiming] = []
    while not stop.is_set():
        ids = prompt_ids(args.prompt_tokens, seed=seed + len(out))
        out.append(await timed_stream(client, gen_body(ids, 1)))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), args.prompt_gap)
    return out


async def stream_round(
    url: str, args: argparse.Namespace, loaded: bool, seed: int
) -> tuple[StreamTiming, list[StreamTiming]]:
    """The stream's timing, and the long prompts answered while it ran."""
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        stop = asyncio.Event()
        stream = asyncio.create_task(
            timed_stream(client, gen_body(STREAM_PROMPT, args.stream_tokens))
        )
        prompts = asyncio.create_task(prompt_robot(client, args, seed, stop)) if loaded else None
        timing = await stream
        stop.set()
        return timing, (await prompts if prompts else [])


async def warm_up(url: str, prompt_tokens: int) -> None:
    """One long prompt next to a short stream: the mixed prefill + decode shapes run once."""
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        await asyncio.gather(
            timed_stream(client, gen_body(prompt_ids(prompt_tokens, seed=-1), 2)),
            timed_stream(client, gen_body(STREAM_PROMPT, 8)),
        )


def label(chunk: int) -> str:
    return f"chunk {chunk}" if chunk > 0 else "no chunking"


def run(args: argparse.Namespace) -> dict[str, Any]:
    bench = setup(args)
    alone: dict[int, list[StreamTiming]] = {c: [] for c in args.chunk_sizes}
    loaded: dict[int, list[StreamTiming]] = {c: [] for c in args.chunk_sizes}
    prompts: dict[int, list[StreamTiming]] = {c: [] for c in args.chunk_sizes}
    with contextlib.ExitStack() as stack:
        servers = {
            c: stack.enter_context(serve(bench, "--chunked-prefill-size", str(c)))
            for c in args.chunk_sizes
        }
        for server in servers.values():
            asyncio.run(warm_up(server.url, args.prompt_tokens))
        for r in range(args.rounds):
            for c, server in servers.items():
                print(f"  round {r + 1}/{args.rounds}: {label(c)}", flush=True)
                timing, _ = asyncio.run(stream_round(server.url, args, False, seed=0))
                alone[c].append(timing)
                timing, answered = asyncio.run(
                    stream_round(server.url, args, True, seed=(r + 1) * 10_000 + c)
                )
                loaded[c].append(timing)
                prompts[c] += answered
    return report(bench, args, alone, loaded, prompts)


def report(
    bench: BenchSetup,
    args: argparse.Namespace,
    alone: dict[int, list[StreamTiming]],
    loaded: dict[int, list[StreamTiming]],
    prompts: dict[int, list[StreamTiming]],
) -> dict[str, Any]:
    rows = []
    for c in args.chunk_sizes:
        base, under = summary_ms(itls(alone[c])), summary_ms(itls(loaded[c]))
        rows.append(
            {
                "prefill": label(c),
                **latency_cols("alone_itl", itls(alone[c])),
                **latency_cols("loaded_itl", itls(loaded[c])),
                "ratio_p99": under["p99"] / base["p99"],
                "ratio_mean": under["mean"] / base["mean"],
                "prompts": len(prompts[c]),
                "prompt_ttft_p50": summary_ms(ttfts(prompts[c]))["p50"],
            }
        )
    series = {f"stream ITL alone, {label(c)}": itls(alone[c]) for c in args.chunk_sizes}
    series |= {
        f"stream ITL with {args.prompt_tokens}-token prompts, {label(c)}": itls(loaded[c])
        for c in args.chunk_sizes
    }
    result = {
        "prompt_tokens": args.prompt_tokens,
        "prompt_gap_s": args.prompt_gap,
        "stream_tokens": args.stream_tokens,
    }
    save_report(
        bench,
        "chunked",
        f"stream ITL while {args.prompt_tokens}-token prompts arrive, by prefill chunking",
        rows,
        result,
        series,
    )
    return result | {"rows": rows}
