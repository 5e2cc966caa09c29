"""Session turn TTFT vs sending the whole prompt each turn.

A robot opens a session on a long context (`--context-tokens`), then each turn sends only its
new tokens with `session_params`; the server rebuilds the prompt from the previous turn's input
and output and reuses its KV through the radix cache (the session pins it). The baseline sends
the same full prompt each turn to a second server started with `--disable-radix-cache`, so
every turn is computed from scratch: on a server with the radix cache the full prompt would hit
the same cached KV and the comparison would measure the radix cache, not the session, in both
columns. Both servers run side by side and each turn goes to one, then the other, so load drift
hits both. Turn 0 (the cold context, computed in full by both) is reported apart. Each turn's
new tokens are also sent alone as a fresh request (radix cache off): the session turn's TTFT
over that one (`vs_alone`) is what carrying the history costs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

import httpx

from vla_harness.stats import summary_ms
from vla_server.bench.scheduler_common import (
    BenchSetup,
    add_common_args,
    gen_body,
    prompt_ids,
    save_report,
    serve,
    setup,
)
from vla_server.bench.stream_client import StreamTiming, timed_stream


def add_args(p: argparse.ArgumentParser) -> None:
    add_common_args(p)
    p.add_argument("--context-tokens", type=int, default=512, help="the session's first prompt")
    p.add_argument("--turn-tokens", type=int, default=16, help="new tokens of each later turn")
    p.add_argument("--output-tokens", type=int, default=8, help="new tokens generated per turn")
    p.add_argument("--turns", type=int, default=5)
    p.add_argument("--sessions", type=int, default=3)


@dataclass
class Turn:
    index: int
    session: StreamTiming
    full: StreamTiming
    alone: StreamTiming  # a fresh request of the turn's new tokens alone (no history)
    full_len: int  # tokens of the full prompt (what the session rebuilt)
    context_len: int  # tokens of the previous turn's prompt + output (what could be reused)


async def one_session(
    session_url: str, full_url: str, args: argparse.Namespace, seed: int
) -> list[Turn]:
    turns: list[Turn] = []
    async with (
        httpx.AsyncClient(base_url=session_url, timeout=600) as cs,
        httpx.AsyncClient(base_url=full_url, timeout=600) as cf,
    ):
        sid = (await cs.post("/open_session", json={"capacity_of_str_len": 1 << 16})).json()
        context: list[int] = []
        for k in range(args.turns):
            new = prompt_ids(args.context_tokens if k == 0 else args.turn_tokens, seed * 100 + k)
            params = {"id": sid} if k == 0 else {"id": sid, "rid": f"{sid}-{k - 1}"}
            body = gen_body(new, args.output_tokens, rid=f"{sid}-{k}", session_params=params)
            s = await timed_stream(cs, body)
            f = await timed_stream(cf, gen_body(context + new, args.output_tokens))
            a = await timed_stream(cf, gen_body(new, args.output_tokens))
            turns.append(Turn(k, s, f, a, len(context + new), len(context)))
            context += new + s.output_ids
        await cs.post("/close_session", json={"session_id": sid})
    return turns


def run(args: argparse.Namespace) -> dict[str, Any]:
    bench = setup(args)
    turns: list[Turn] = []
    with contextlib.ExitStack() as stack:
        session_server = stack.enter_context(serve(bench))
        full_server = stack.enter_context(serve(bench, "--disable-radix-cache"))
        asyncio.run(one_session(session_server.url, full_server.url, args, seed=10_000))  # warm
        for i in range(args.sessions):
            print(f"  session {i + 1}/{args.sessions}: {args.turns} turns", flush=True)
            turns += asyncio.run(one_session(session_server.url, full_server.url, args, seed=i))
    return report(bench, args, turns)


def _row(case: str, turns: list[Turn]) -> dict[str, Any]:
    s = summary_ms([t.session.ttft for t in turns])
    f = summary_ms([t.full.ttft for t in turns])
    a = summary_ms([t.alone.ttft for t in turns])
    cached = [t.session.last["meta_info"]["cached_tokens"] if t.session.last else 0 for t in turns]
    return {
        "turns": case,
        "n": len(turns),
        "prompt_tokens_mean": sum(t.full_len for t in turns) / len(turns),
        "session_ttft_p50": s["p50"],
        "session_ttft_p99": s["p99"],
        "full_ttft_p50": f["p50"],
        "full_ttft_p99": f["p99"],
        "ratio_p50": s["p50"] / f["p50"],
        "ratio_p99": s["p99"] / f["p99"],
        # what the history costs: the turn vs a prompt made of its new tokens alone
        "alone_ttft_p50": a["p50"],
        "vs_alone_p50": s["p50"] / a["p50"],
        "vs_alone_p99": s["p99"] / a["p99"],
        "cached_minus_context_min": min(
            c - t.context_len for c, t in zip(cached, turns, strict=True)
        ),
        "outputs_equal": sum(t.session.output_ids == t.full.output_ids for t in turns),
    }


def report(bench: BenchSetup, args: argparse.Namespace, turns: list[Turn]) -> dict[str, Any]:
    rows = [_row(f"turn {k}", [t for t in turns if t.index == k]) for k in range(args.turns)]
    rows.append(_row(f"turns 1-{args.turns - 1}", [t for t in turns if t.index > 0]))
    print(
        "ratio = session turn TTFT / full-prompt TTFT (radix cache off); cached_minus_context: "
        "the session turn's cached_tokens minus the previous turn's prompt + output length"
    )
    later = [t for t in turns if t.index > 0]
    series = {
        "TTFT, session turn (1+)": [t.session.ttft for t in later],
        "TTFT, full prompt, no radix cache (1+)": [t.full.ttft for t in later],
        "TTFT, turn 0 (cold), session": [t.session.ttft for t in turns if t.index == 0],
    }
    result = {
        "context_tokens": args.context_tokens,
        "turn_tokens": args.turn_tokens,
        "output_tokens": args.output_tokens,
    }
    save_report(bench, "session", "session turn TTFT vs full-prompt TTFT", rows, result, series)
    return result | {"rows": rows}
