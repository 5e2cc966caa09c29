"""Robot sessions through a live node: turns rebuilt from the parent turn (SGLang's
`session_params`) give transformers' greedy output on the full prompt and reuse the previous
turn's KV through the radix cache; session errors are 400s naming the field; the session's
robot defaults (priority, deadline, unnorm key) fill the requests that leave them unset.

The scheduling rules (offset, replace, drop_previous_output, branching, busy sessions, turns
that never ran, supersede, capacity, pins under KV pressure and their bound, idle reaping) are
unit tests on the scheduling core: tests/unit/scheduler/test_sched_sessions.py.
"""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np
import pytest

from tests.support.actions import Demo, openvla_actions
from tests.support.async_node import body, finish_type, internal, json_of, meta, metric
from tests.support.hf_reference import causal_lm, greedy_ids
from tests.support.server import run_server
from vla_server.policies.llava.demo import demo_model_path

NEW = 16


@pytest.fixture(scope="module")
def node(llama_path, tmp_path_factory):
    with run_server(
        llama_path, tmp_path_factory.mktemp("sessions"), "--max-total-tokens", "700"
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


async def test_session_errors_are_400s_naming_the_field(node):
    async with node.async_client() as c:
        unknown = await c.post("/generate", json=body([7], 4, session_params={"id": "no-such"}))
        assert unknown.status_code == 400
        assert unknown.json()["error"]["field"] == "session_params.id"
        sid = await open_session(c, session_id="err-session")
        dup = await c.post("/open_session", json={"session_id": sid})
        assert dup.status_code == 400 and dup.json()["error"]["field"] == "session_id"
        await turn(c, tokens(0, 4), "err-1", n=4, id=sid)
        for field, params in (
            ("session_params.rid", {"id": sid, "rid": "none"}),
            ("session_params.offset", {"id": sid, "offset": 10_000}),
        ):
            r = await c.post("/generate", json=body([7], 4, session_params=params))
            assert r.status_code == 400 and r.json()["error"]["field"] == field, r.text
        await close_session(c, sid)
        closed = await c.post("/generate", json=body([7], 4, session_params={"id": sid}))
        assert closed.status_code == 400
        assert closed.json()["error"]["field"] == "session_params.id"
        again = await c.post("/close_session", json={"session_id": sid})
        assert again.status_code == 400 and again.json()["error"]["field"] == "session_id"


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
