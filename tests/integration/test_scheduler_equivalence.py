"""Greedy outputs do not depend on how the scheduler runs them: overlap on/off, radix cache
on/off, chunked prefill on/off with small chunks, and under KV-pressure retraction. Stop token
ids and short max_new_tokens end every request exactly where the full greedy output says, in
every mode: the overlap loop, whose finishing decisions lag a step, never emits a token past a
stop condition."""

from __future__ import annotations

import asyncio

import pytest

from tests.support.server import run_server

NEW = 24
# Lengths from 1 to ~250 tokens, with shared prefixes so the radix cache has work to do.
BASE = list(range(20, 140))
PROMPTS = [
    BASE[:1],
    BASE[:7],
    BASE[:40],
    BASE + BASE[:90],
    BASE[:33] + [300, 301],
    BASE[:40] + [5, 6, 7],
    BASE,
    [400 + i % 50 for i in range(180)],
]
CONFIGS = {
    "plain": ["--disable-overlap-schedule", "--disable-radix-cache", "--chunked-prefill-size", "0"],
    "overlap": ["--disable-radix-cache", "--chunked-prefill-size", "0"],
    "radix": ["--disable-overlap-schedule", "--chunked-prefill-size", "0"],
    "chunk16": [
        "--disable-overlap-schedule",
        "--disable-radix-cache",
        "--chunked-prefill-size",
        "16",
    ],
    "everything": ["--chunked-prefill-size", "7"],
    "kv-pressure": [
        "--chunked-prefill-size",
        "32",
        "--decode-reserve-ratio",
        "0.05",
        "--max-total-tokens",
        "300",
    ],
}


async def _run(server) -> list[list[int]]:
    body = {"sampling_params": {"max_new_tokens": NEW, "temperature": 0, "ignore_eos": True}}
    async with server.async_client() as c:
        # Two waves: the second finds the first's prefixes in the radix cache.
        outs = []
        for wave in range(2):
            rs = await asyncio.gather(
                *(c.post("/generate", json={**body, "input_ids": p}) for p in PROMPTS)
            )
            assert all(r.status_code == 200 for r in rs), [r.text for r in rs]
            outs += [r.json() for r in rs]
            if wave == 0:
                await asyncio.sleep(0.1)
    return outs


def _stop_bodies(full: list[list[int]]) -> list[tuple[dict, list[int]]]:
    """Requests that must stop early, each with the output the full greedy output implies: at
    the first occurrence of a stop id taken from that output (it is included), or at a short
    max_new_tokens."""
    cases = []
    for i, (prompt, out) in enumerate(zip(PROMPTS, full, strict=True)):
        stop_id = out[3 + i % 7]
        expected = out[: out.index(stop_id) + 1]
        params = {"max_new_tokens": NEW, "temperature": 0, "stop_token_ids": [stop_id]}
        cases.append(({"input_ids": prompt, "sampling_params": params}, expected))
        short = {"max_new_tokens": 1 + i % 3, "temperature": 0, "ignore_eos": True}
        cases.append(({"input_ids": prompt, "sampling_params": short}, out[: 1 + i % 3]))
    return cases


async def _run_stops(server, cases: list[tuple[dict, list[int]]]) -> list[list[int]]:
    async with server.async_client() as c:
        rs = await asyncio.gather(*(c.post("/generate", json=b) for b, _ in cases))
    assert all(r.status_code == 200 for r in rs), [r.text for r in rs]
    return [r.json()["output_ids"] for r in rs]


@pytest.fixture(scope="module")
def reference(llama_path, tmp_path_factory):
    with run_server(
        llama_path, tmp_path_factory.mktemp("ref"), *CONFIGS["plain"], "--max-total-tokens", "8192"
    ) as server:
        full = asyncio.run(_run(server))
        cases = _stop_bodies([o["output_ids"] for o in full[: len(PROMPTS)]])
        return full, cases, asyncio.run(_run_stops(server, cases))


def test_plain_loop_stops_where_the_full_output_says(reference):
    _, cases, stopped = reference
    assert stopped == [expected for _, expected in cases]


@pytest.mark.parametrize("name", [n for n in CONFIGS if n != "plain"])
def test_greedy_outputs_identical_across_scheduler_modes(name, reference, llama_path, tmp_path):
    args = CONFIGS[name]
    if "--max-total-tokens" not in args:
        args = [*args, "--max-total-tokens", "8192"]
    full, cases, _ = reference
    with run_server(llama_path, tmp_path, *args) as server:
        outs = asyncio.run(_run(server))
        stopped = asyncio.run(_run_stops(server, cases))
        info = server.client().get("/get_server_info").json()
    assert [o["output_ids"] for o in outs] == [o["output_ids"] for o in full]
    assert stopped == [expected for _, expected in cases]
    assert all(len(o["output_ids"]) == NEW for o in outs)
    if "radix" in name or name == "everything":
        assert any(o["meta_info"]["cached_tokens"] > 0 for o in outs[len(PROMPTS) :])
        assert info["internal_states"][0]["radix_cache"]["hit_tokens"] > 0
    if name == "kv-pressure":
        assert info["internal_states"][0]["num_retractions"] > 0, "the pool was meant to run short"
    assert info["kv_pool"]["used"] == 0 and info["num_pending_requests"] == 0
