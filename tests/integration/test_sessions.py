"""Robot sessions on a live node: prompt rebuilding from the parent turn (SGLang's
`session_params` semantics) against transformers' greedy output on the full prompt, KV reuse
through the radix cache, pins that survive KV pressure within `--max-session-held-tokens`,
errors, robot defaults, idle reaping, and KV back to idle after close + flush."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import numpy as np
import pytest

from tests.hf_reference import causal_lm, greedy_ids
from tests.integration.sched_helpers import (
    body,
    finish_type,
    internal,
    json_of,
    meta,
    metric,
    resume,
    saturate,
    wait_idle,
    wait_pending,
    wait_until,
)
from tests.integration.test_mm_actions import Demo, openvla_actions
from tests.server_process import run_server
from vla_server.model.demo import demo_model_path

POOL = 700
HELD = 250  # --max-session-held-tokens
NEW = 16


@pytest.fixture(scope="module")
def node(llama_path, tmp_path_factory):
    with run_server(
        llama_path,
        tmp_path_factory.mktemp("sessions"),
        "--max-total-tokens",
        str(POOL),
        "--max-session-held-tokens",
        str(HELD),
    ) as s:
        yield s


@pytest.fixture(scope="module")
def hf_greedy(llama_path):
    model = causal_lm(llama_path)

    def run(ids: list[int], n: int = NEW) -> list[int]:
        return greedy_ids(model, ids, n)

    return run


def tokens(start: int, n: int) -> list[int]:
    """`n` distinct ids from `start` (kept away from the special ids 0..5)."""
    return [6 + (start + i) % 500 for i in range(n)]


async def open_session(c: httpx.AsyncClient, **fields: Any) -> str:
    r = await c.post("/open_session", json={"capacity_of_str_len": 4096, **fields})
    assert r.status_code == 200, r.text
    return r.json()


async def close_session(c: httpx.AsyncClient, sid: str) -> None:
    r = await c.post("/close_session", json={"session_id": sid})
    assert r.status_code == 200, r.text


async def turn(
    c: httpx.AsyncClient, ids: list[int], req_id: str, n: int = NEW, **params: Any
) -> dict[str, Any]:
    """One session turn with request id `req_id` and `session_params` `params`."""
    req = body(ids, n, rid=req_id, session_params=params)
    return await json_of(c.post("/generate", json=req))


async def flush(c: httpx.AsyncClient) -> None:
    r = await c.post("/flush_cache")
    assert r.status_code == 200, r.text


async def test_five_turns_reuse_the_whole_previous_turn(node, hf_greedy):
    async with node.async_client() as c:
        sid = await open_session(c)
        history: list[int] = []  # the previous turn's prompt + completion
        outs = []
        for k in range(5):
            new = tokens(40 * k, 6 + k)
            out = await turn(c, new, f"five-{k}", id=sid)
            full = history + new
            assert meta(out)["prompt_tokens"] == len(full)
            if k:
                # The previous turn's last sampled token was never fed back, so it has no KV:
                # len(history) - 1 is the most that can be cached.
                assert meta(out)["cached_tokens"] >= len(history) - 1
            assert out["output_ids"] == hf_greedy(full), f"turn {k}"
            outs.append((full, out["output_ids"]))
            history = full + out["output_ids"]
        radix = (await internal(c))["radix_cache"]
        assert await metric(c, "vla_cache_hit_rate") == pytest.approx(radix["hit_rate"])
        assert radix["hit_tokens"] >= sum(len(f) for f, _ in outs[:-1])
        await close_session(c, sid)
        # The same prompts sent whole, without a session, give the same greedy outputs.
        for full, ids in outs:
            assert (await json_of(c.post("/generate", json=body(full, NEW))))["output_ids"] == ids


async def test_offset_drop_previous_output_replace_and_branching(node, hf_greedy):
    async with node.async_client() as c:
        sid = await open_session(c)
        a = tokens(300, 8)
        t1 = await turn(c, a, "br-1", id=sid)
        ctx1 = a + t1["output_ids"]

        async def check(req_id: str, new: list[int], prompt: list[int], **params: Any) -> dict:
            out = await turn(c, new, req_id, id=sid, **params)
            assert meta(out)["prompt_tokens"] == len(prompt), (req_id, meta(out))
            assert out["output_ids"] == hf_greedy(prompt), req_id
            return out

        # drop_previous_output: the parent's prompt without its output
        out = await check("br-2", tokens(320, 5), a + tokens(320, 5), drop_previous_output=True)
        assert meta(out)["cached_tokens"] >= len(a)
        # offset: the first 11 tokens of the parent's prompt + output (parent chosen by rid)
        out = await check("br-3", tokens(330, 4), ctx1[:11] + tokens(330, 4), rid="br-1", offset=11)
        assert meta(out)["cached_tokens"] >= 11
        # branching: br-4 continues br-1 although br-2 and br-3 came later
        b4 = await check("br-4", tokens(340, 3), ctx1 + tokens(340, 3), rid="br-1")
        ctx4 = ctx1 + tokens(340, 3) + b4["output_ids"]
        # without rid the parent is the latest turn (br-4)
        await check("br-5", tokens(350, 3), ctx4 + tokens(350, 3))
        # replace with rid: the turns after br-1 are dropped, br-6 continues br-1
        b6 = await check("br-6", tokens(360, 3), ctx1 + tokens(360, 3), rid="br-1", replace=True)
        gone = await c.post(
            "/generate", json=body([7], 4, session_params={"id": sid, "rid": "br-3"})
        )
        assert gone.status_code == 400 and "br-3" in gone.json()["error"]["message"]
        ctx6 = ctx1 + tokens(360, 3) + b6["output_ids"]
        await check("br-7", tokens(370, 3), ctx6 + tokens(370, 3))
        # replace without rid: a fresh start, nothing of the history in the prompt
        await check("br-8", tokens(380, 5), tokens(380, 5), replace=True)
        await close_session(c, sid)


async def test_session_errors_are_400s(node):
    async with node.async_client() as c:
        unknown = await c.post("/generate", json=body([7], 4, session_params={"id": "no-such"}))
        assert unknown.status_code == 400
        assert unknown.json()["error"]["field"] == "session_params.id"
        sid = await open_session(c, session_id="err-session")
        dup = await c.post("/open_session", json={"session_id": sid})
        assert dup.status_code == 400 and dup.json()["error"]["field"] == "session_id"
        # busy: the parent turn is still running
        (first,) = await saturate(
            c, [body(tokens(0, 4), 400, rid="err-1", session_params={"id": sid})]
        )
        busy = asyncio.create_task(
            c.post("/generate", json=body([7], 4, session_params={"id": sid}))
        )
        await wait_pending(c, 2)
        await resume(c)
        r = await busy
        assert r.status_code == 400 and "busy" in r.json()["error"]["message"], r.text
        assert r.json()["error"]["field"] == "session_params.id"
        assert finish_type(await json_of(first)) == "length"
        bad_rid = await c.post(
            "/generate", json=body([7], 4, session_params={"id": sid, "rid": "x"})
        )
        assert bad_rid.status_code == 400 and "no turn" in bad_rid.json()["error"]["message"]
        await close_session(c, sid)
        closed = await c.post("/generate", json=body([7], 4, session_params={"id": sid}))
        assert closed.status_code == 400
        assert closed.json()["error"]["field"] == "session_params.id"
        again = await c.post("/close_session", json={"session_id": sid})
        assert again.status_code == 400 and again.json()["error"]["field"] == "session_id"


async def test_scheduler_side_session_errors_name_the_field(node):
    async with node.async_client() as c:
        sid = await open_session(c)
        await turn(c, tokens(0, 4), "fields-1", n=4, id=sid)
        fields = {}
        for name, params in (
            ("session_params.rid", {"id": sid, "rid": "none"}),
            ("session_params.offset", {"id": sid, "offset": 10_000}),
        ):
            r = await c.post("/generate", json=body([7], 4, session_params=params))
            assert r.status_code == 400
            fields[name] = r.json()["error"].get("field")
        await close_session(c, sid)
    assert fields == {name: name for name in fields}


async def test_session_defaults_apply_to_unset_fields(node):
    """priority and deadline_ms of the session fill requests that leave them unset."""
    async with node.async_client() as c:
        sid = await open_session(c, priority=7, deadline_ms=1e-3)
        before = await metric(c, "vla_requests_total", finish="deadline", priority="7")
        # a deadline of 1 us after receipt has passed before the scheduler looks at it
        late = await json_of(c.post("/generate", json=body(tokens(0, 4), 8, session_id=sid)))
        assert finish_type(late) == "deadline"
        assert await metric(c, "vla_requests_total", finish="deadline", priority="7") == before + 1
        own = body(tokens(0, 4), 8, session_id=sid, priority=3, deadline_ms=1e7)
        before = await metric(c, "vla_requests_total", finish="length", priority="3")
        assert finish_type(await json_of(c.post("/generate", json=own))) == "length"
        assert await metric(c, "vla_requests_total", finish="length", priority="3") == before + 1
        await close_session(c, sid)


async def test_a_turn_that_never_ran_does_not_block_the_session(node, hf_greedy):
    """A turn ended by its deadline before it ran leaves no context: the next turn continues
    from the turn before it."""
    async with node.async_client() as c:
        sid = await open_session(c)
        first = await turn(c, tokens(0, 4), "unrun-1", n=4, id=sid)
        ctx = tokens(0, 4) + first["output_ids"]
        late = body(tokens(50, 4), 8, rid="unrun-2", deadline_ms=1e-3, session_params={"id": sid})
        assert finish_type(await json_of(c.post("/generate", json=late))) == "deadline"
        nxt = await c.post("/generate", json=body([7], 4, session_params={"id": sid}))
        await close_session(c, sid)
    assert nxt.status_code == 200, nxt.text
    assert meta(nxt.json())["prompt_tokens"] == len(ctx) + 1
    assert nxt.json()["output_ids"] == hf_greedy(ctx + [7], 4)


async def test_idle_timeout_reaps_the_session_and_its_pins(node):
    async with node.async_client() as c:
        await flush(c)
        sid = await open_session(c, timeout=2)
        await turn(c, tokens(0, 20), "reap-1", n=4, id=sid)
        state = await internal(c)
        assert state["kv_pool"]["pinned"] == 20 + 4 - 1
        n_open = state["open_sessions"]
        state = await wait_until(c, lambda s: s["open_sessions"] == n_open - 1, "reaping")
        assert state["kv_pool"]["pinned"] == 0 and state["kv_pool"]["used"] == 0
        r = await c.post("/generate", json=body([7], 4, session_params={"id": sid}))
        assert r.status_code == 400 and "closed" in r.json()["error"]["message"]
        assert r.json()["error"]["field"] == "session_params.id"


async def test_idle_session_is_reaped_while_the_node_is_busy(node):
    """Right after the session's turn the node is kept busy without a break (two 440-token
    requests in flight at all times, which do not fit the pool together): the session is reaped
    meanwhile, not only once the node is idle again."""

    def busy_left(s: dict) -> int:
        return s["num_running_reqs"] + s["num_waiting_reqs"]

    async with node.async_client() as c:
        n_before = (await internal(c))["open_sessions"]
        sid = await open_session(c, timeout=0.2)
        await turn(c, tokens(200, 4), "busy-reap-1", n=4, id=sid)
        stop = asyncio.Event()

        async def keep_busy(i: int) -> None:
            while not stop.is_set():
                await json_of(c.post("/generate", json=body(tokens(50 * i, 4), 440)))

        feeders = [asyncio.create_task(keep_busy(i)) for i in range(2)]
        await wait_until(c, lambda s: busy_left(s) == 2, "the busy requests")
        state = await wait_until(c, lambda s: s["open_sessions"] == n_before, "reaping")
        stop.set()
        await asyncio.gather(*feeders)
    assert busy_left(state) > 0, "the session was reaped only once the node was idle"


async def test_pins_yield_to_a_request_that_cannot_fit_next_to_them(node):
    async with node.async_client() as c:
        await flush(c)
        sid = await open_session(c)
        await turn(c, tokens(0, 200), "pins-1", n=40, id=sid)
        assert (await internal(c))["kv_pool"]["pinned"] == 239
        # 502 tokens fit the pool of 700, but not next to 239 pinned ones
        big = asyncio.create_task(c.post("/generate", json=body(tokens(300, 2), 500)))
        small = asyncio.create_task(c.post("/generate", json=body(tokens(310, 2), 4)))
        try:
            # a liveness bound, not a latency threshold: 5 tokens need far less than this
            done = await asyncio.wait_for(asyncio.shield(small), 30)
        except TimeoutError:
            done = None
        finally:
            await close_session(c, sid)
            await asyncio.gather(big, small)
    assert done is not None and done.status_code == 200, "the request behind it never ran"


@pytest.fixture(scope="module")
def lean_node(llama_path, tmp_path_factory):
    """Admission reserves a fifth of each request's new tokens: KV can run short mid-decode."""
    with run_server(
        llama_path,
        tmp_path_factory.mktemp("sessions-lean"),
        "--max-total-tokens",
        str(POOL),
        "--max-session-held-tokens",
        str(HELD),
        "--decode-reserve-ratio",
        "0.2",
    ) as s:
        yield s


async def test_pins_yield_to_a_running_request_that_runs_short_of_kv(lean_node, hf_greedy):
    """With 239 tokens pinned, a lone request admitted on a 20 % reserve grows past what is left
    of the pool of 700: the session's pin gives way (the request cannot be retracted in favour
    of nothing), the request runs to its end and the node keeps serving."""
    async with lean_node.async_client() as c:
        sid = await open_session(c)
        first = await turn(c, tokens(0, 200), "lean-1", n=40, id=sid)
        assert (await internal(c))["kv_pool"]["pinned"] == 239
        out = await json_of(c.post("/generate", json=body(tokens(300, 2), 500)))
        assert meta(out)["completion_tokens"] == 500
        state = await wait_idle(c)
        assert state["kv_pool"]["pinned"] == 0
        ctx = tokens(0, 200) + first["output_ids"]
        nxt = await turn(c, [7], "lean-2", n=4, id=sid)
        assert nxt["output_ids"] == hf_greedy(ctx + [7], 4)
        await close_session(c, sid)


async def test_a_superseding_turn_continues_from_before_the_stale_one(node, hf_greedy):
    """Two busy requests hold the pool (2 x 342 of 700 tokens), so a session turn waits; a
    second turn with `supersede` ends it (superseded) and is built from the last finished turn,
    not from the stale one (which never ran, and as a parent would make the session busy)."""
    async with node.async_client() as c:
        await flush(c)
        sid = await open_session(c)
        first = await turn(c, tokens(0, 4), "sup-1", n=4, id=sid)
        ctx = tokens(0, 4) + first["output_ids"]
        busy = [
            asyncio.create_task(c.post("/generate", json=body(tokens(100 * i, 2), 340)))
            for i in (1, 2)
        ]
        await wait_until(c, lambda s: s["num_running_reqs"] == 2, "the busy requests")

        def frame(i: int) -> asyncio.Task:
            req = body(tokens(20 * i, 3), 20, rid=f"sup-{i}", supersede=True)
            return asyncio.create_task(
                c.post("/generate", json={**req, "session_params": {"id": sid}})
            )

        stale = frame(2)
        await wait_until(c, lambda s: s["num_waiting_reqs"] == 1, "the first frame waiting")
        newest = frame(3)
        assert finish_type(await json_of(stale)) == "superseded"
        out = await json_of(newest)
        prompt = ctx + tokens(60, 3)
        assert meta(out)["prompt_tokens"] == len(prompt)
        assert out["output_ids"] == hf_greedy(prompt, 20)
        nxt = await turn(c, [7], "sup-4", n=4, id=sid)
        assert nxt["output_ids"] == hf_greedy(prompt + out["output_ids"] + [7], 4)
        await asyncio.gather(*busy)
        await close_session(c, sid)


async def test_capacity_of_str_len_bounds_the_context_and_a_rejected_turn_changes_nothing(
    node, hf_greedy
):
    async with node.async_client() as c:
        sid = await open_session(c, capacity_of_str_len=20)
        first = await turn(c, tokens(0, 8), "cap-1", n=4, id=sid)
        ctx = tokens(0, 8) + first["output_ids"]  # 12 tokens
        for params in ({"id": sid}, {"id": sid, "replace": True}, {"id": sid, "rid": "cap-1"}):
            n_new = 21 if params.get("replace") else 9  # 12 + 9 > 20; a fresh start of 21
            r = await c.post("/generate", json=body(tokens(50, n_new), 4, session_params=params))
            assert r.status_code == 400, r.text
            error = r.json()["error"]
            assert "capacity_of_str_len 20" in error["message"]
            assert error["field"] == "session_params.id"
        # nothing was dropped by the rejected `replace`: the session continues from cap-1
        nxt = await turn(c, [7], "cap-2", n=4, id=sid)
        assert meta(nxt)["prompt_tokens"] == len(ctx) + 1
        assert nxt["output_ids"] == hf_greedy(ctx + [7], 4)
        await close_session(c, sid)


async def pressure(c: httpx.AsyncClient, start: int) -> None:
    """A request whose KV does not fit next to what is cached: unpinned prefixes are evicted."""
    out = await json_of(c.post("/generate", json=body(tokens(start, 8), 480)))
    assert meta(out)["completion_tokens"] == 480


async def test_pinned_context_survives_kv_pressure_and_close_releases_it(node):
    async with node.async_client() as c:
        await flush(c)
        sid = await open_session(c)
        first = await turn(c, tokens(0, 100), "pin-1", n=20, id=sid)
        held = 100 + 20 - 1
        prefix = tokens(200, 150)
        assert meta(await json_of(c.post("/generate", json=body(prefix, 1))))["cached_tokens"] == 0
        state = await internal(c)
        assert state["kv_pool"]["pinned"] == held and state["kv_pool"]["cached"] == 150
        await pressure(c, 400)  # 488 tokens > 700 - 119 pinned - 150 cached
        again = await json_of(c.post("/generate", json=body(prefix, 1)))
        assert meta(again)["cached_tokens"] < len(prefix) - 1, "the unpinned prefix was evicted"
        nxt = await turn(c, tokens(120, 4), "pin-2", n=4, id=sid)
        assert meta(nxt)["cached_tokens"] >= held == len(first["output_ids"]) + 100 - 1
        assert (await internal(c))["kv_pool"]["pinned"] == held + 4 + 4
        await close_session(c, sid)
        state = await wait_idle(c)
        assert state["kv_pool"]["pinned"] == 0 and state["kv_pool"]["used"] == 0
        assert state["kv_pool"]["cached"] > 0
        await flush(c)
        state = await internal(c)
    assert state["kv_pool"]["used"] == 0 and state["kv_pool"]["cached"] == 0
    assert state["kv_pool"]["free"] == state["kv_pool"]["total"] == POOL


async def test_held_tokens_bound_unpins_the_oldest_session(node):
    async with node.async_client() as c:
        await flush(c)
        old, new = await open_session(c), await open_session(c)
        await turn(c, tokens(0, 130), "held-old", n=20, id=old)
        await turn(c, tokens(200, 130), "held-new", n=20, id=new)
        # 2 x 149 > 250: the older session lost its pin
        assert (await internal(c))["kv_pool"]["pinned"] == 149
        await pressure(c, 400)
        old2 = await turn(c, [7, 8], "held-old-2", n=4, id=old)
        new2 = await turn(c, [7, 8], "held-new-2", n=4, id=new)
        assert meta(old2)["cached_tokens"] < 149
        assert meta(new2)["cached_tokens"] >= 149
        for sid in (old, new):
            await close_session(c, sid)
        await flush(c)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    path = demo_model_path()
    with run_server(path, tmp_path_factory.mktemp("sessions-demo")) as server:
        yield Demo(path, server)


async def test_session_unnorm_key_default(demo):
    """A session opened for one robot un-normalises its actions with that robot's statistics
    (OpenVLA's formula, implemented in test_mm_actions), unless a request names another key."""
    async with demo.server.async_client() as c:
        bad = await c.post("/open_session", json={"unnorm_key": "no-such-robot"})
        assert bad.status_code == 400 and bad.json()["error"]["field"] == "unnorm_key"
        sid = await open_session(c, unnorm_key="aloha_left")
        req = {k: v for k, v in demo.body(1, "demo_arm", 4).items() if k != "unnorm_key"}
        outs = {
            key: await json_of(c.post("/generate", json={**req, "session_id": sid, **extra}))
            for key, extra in (("aloha_left", {}), ("demo_arm", {"unnorm_key": "demo_arm"}))
        }
        await close_session(c, sid)
    for key, out in outs.items():
        want = openvla_actions(out["output_ids"], demo.vocab_size, demo.spec, key)
        np.testing.assert_allclose(np.asarray(out["actions"]), want, rtol=0, atol=1e-12)
