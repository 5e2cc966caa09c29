"""Greedy outputs do not depend on how the scheduler runs them: overlap on/off, radix cache
on/off, chunked prefill on/off with small chunks, and under KV-pressure retraction."""

from __future__ import annotations

import asyncio

import pytest

from tests.server_process import run_server

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


@pytest.fixture(scope="module")
def reference(llama_path, tmp_path_factory):
    with run_server(
        llama_path, tmp_path_factory.mktemp("ref"), *CONFIGS["plain"], "--max-total-tokens", "8192"
    ) as server:
        return asyncio.run(_run(server))


@pytest.mark.parametrize("name", [n for n in CONFIGS if n != "plain"])
def test_greedy_outputs_identical_across_scheduler_modes(name, reference, llama_path, tmp_path):
    args = CONFIGS[name]
    if "--max-total-tokens" not in args:
        args = [*args, "--max-total-tokens", "8192"]
    with run_server(llama_path, tmp_path, *args) as server:
        outs = asyncio.run(_run(server))
        info = server.client().get("/get_server_info").json()
    assert [o["output_ids"] for o in outs] == [o["output_ids"] for o in reference]
    assert all(len(o["output_ids"]) == NEW for o in outs)
    if "radix" in name or name == "everything":
        assert any(o["meta_info"]["cached_tokens"] > 0 for o in outs[len(PROMPTS) :])
        assert info["internal_states"][0]["radix_cache"]["hit_tokens"] > 0
    if name == "kv-pressure":
        assert info["internal_states"][0]["num_retractions"] > 0, "the pool was meant to run short"
    assert info["kv_pool"]["used"] == 0 and info["num_pending_requests"] == 0
