"""Robot sessions on the scheduling core: prompts rebuilt from a parent turn (SGLang's
`session_params`: offset, replace, drop_previous_output, branching by rid), KV reuse through
the radix cache, pins bounded by `max_session_held_tokens` that yield to requests that would
not fit, idle reaping (also while busy), errors naming their field, and turns that never ran."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.sched_fakes import BOS, Harness, greedy, reference
from vla_server.io_struct import (
    CloseSessionReq,
    ContinueGenerationReq,
    FlushCacheReq,
    GetInternalStateReq,
    OpenSessionReq,
    PauseGenerationReq,
)

POOL = 700
HELD = 250
NEW = 16


def tokens(start: int, n: int) -> list[int]:
    """`n` ids from `start`, kept clear of BOS and EOS."""
    return [3 + (start + i) % 60 for i in range(n)]


def node(**cfg: Any) -> Harness:
    return Harness(pool=POOL, max_session_held_tokens=HELD, **cfg)


def open_session(h: Harness, sid: str, **fields: Any) -> None:
    reply = h.control(OpenSessionReq, session_id=sid, **{"capacity_of_str_len": 4096, **fields})
    assert reply.success, reply.message


def close_session(h: Harness, sid: str) -> None:
    assert h.control(CloseSessionReq, session_id=sid).success


def turn(h: Harness, req_id: str, ids: list[int], n: int = NEW, **params: Any) -> list[int]:
    """One session turn (request `req_id`, `session_params` `params`) run to its end."""
    h.submit(req_id, ids, n, session=params)
    h.run()
    assert h.out[req_id].finish_type == "length", h.out[req_id].finish
    return h.out[req_id].ids


def kv_state(h: Harness) -> dict[str, int]:
    return h.control(GetInternalStateReq).data["kv_pool"]


def test_session_turns_rebuild_the_prompt_and_reuse_the_previous_turn():
    h = node()
    open_session(h, "s")
    history: list[int] = []  # the previous turn's prompt + output
    for k in range(5):
        new = tokens(40 * k, 6 + k)
        out = turn(h, f"t{k}", new, id="s")
        full = history + new
        assert h.out[f"t{k}"].meta.prompt_tokens == len(full)
        # the previous turn's last sampled token was never fed back: it has no KV
        assert h.out[f"t{k}"].meta.cached_tokens == max(len(history) - 1, 0)
        assert out == reference(full, NEW), f"turn {k}"
        history = full + out
    close_session(h, "s")
    h.assert_clean()


def test_session_offset_drop_previous_output_replace_and_branching():
    h = node()
    open_session(h, "s")
    a = tokens(300, 8)
    ctx1 = a + turn(h, "br-1", a, id="s")

    def check(req_id: str, new: list[int], prompt: list[int], **params: Any) -> list[int]:
        out = turn(h, req_id, new, id="s", **params)
        assert h.out[req_id].meta.prompt_tokens == len(prompt), req_id
        assert out == reference(prompt, NEW), req_id
        return out

    # drop_previous_output: the parent's prompt without its output
    check("br-2", tokens(320, 5), a + tokens(320, 5), drop_previous_output=True)
    assert h.out["br-2"].meta.cached_tokens == len(a)
    # offset: the first 11 tokens of the parent's prompt + output (parent chosen by rid)
    check("br-3", tokens(330, 4), ctx1[:11] + tokens(330, 4), rid="br-1", offset=11)
    # branching: br-4 continues br-1 although br-2 and br-3 came later
    ctx4 = ctx1 + tokens(340, 3)
    ctx4 += check("br-4", tokens(340, 3), ctx4, rid="br-1")
    # without rid the parent is the latest turn (br-4)
    check("br-5", tokens(350, 3), ctx4 + tokens(350, 3))
    # replace with rid: the turns after br-1 go, br-6 continues br-1
    ctx6 = ctx1 + tokens(360, 3)
    ctx6 += check("br-6", tokens(360, 3), ctx6, rid="br-1", replace=True)
    h.submit("gone", [7], 4, session={"id": "s", "rid": "br-3"})
    assert h.out["gone"].finish["field"] == "session_params.rid"
    assert "br-3" in h.out["gone"].finish["message"]
    check("br-7", tokens(370, 3), ctx6 + tokens(370, 3))
    # replace without rid: a fresh start, nothing of the history in the prompt
    check("br-8", tokens(380, 5), tokens(380, 5), replace=True)
    close_session(h, "s")
    h.assert_clean()


def test_session_a_new_turns_bos_is_dropped_after_the_context():
    h = node()
    open_session(h, "s")
    first = [BOS, *tokens(0, 4)]
    ctx = first + turn(h, "t1", first, id="s")
    turn(h, "t2", [BOS, 9, 9], id="s")
    assert h.out["t2"].meta.prompt_tokens == len(ctx) + 2
    assert h.out["t2"].ids == reference(ctx + [9, 9], NEW)


def test_session_errors_name_the_field():
    h = node()
    h.submit("unknown", [7], 4, session={"id": "no-such"})
    reason = h.out["unknown"].finish
    assert reason["status_code"] == 400 and reason["field"] == "session_params.id"
    assert reason["message"] == "unknown or closed session 'no-such'"
    open_session(h, "s")
    dup = h.control(OpenSessionReq, session_id="s")
    assert not dup.success and "already open" in dup.message
    turn(h, "t1", tokens(0, 4), 4, id="s")
    for rid, params, field in (
        ("bad-rid", {"rid": "none"}, "session_params.rid"),
        ("bad-offset", {"offset": 10_000}, "session_params.offset"),
    ):
        h.submit(rid, [7], 4, session={"id": "s", **params})
        assert h.out[rid].finish["field"] == field
    close_session(h, "s")
    h.submit("closed", [7], 4, session={"id": "s"})
    assert h.out["closed"].finish["field"] == "session_params.id"
    again = h.control(CloseSessionReq, session_id="s")
    assert not again.success and "unknown session" in again.message
    h.run()
    h.assert_clean()


def test_session_busy_while_its_parent_turn_runs():
    h = node()
    open_session(h, "s")
    h.submit("t1", tokens(0, 4), 40, session={"id": "s"})
    h.step()
    h.submit("latest", [7], 4, session={"id": "s"})
    h.submit("by-rid", [7], 4, session={"id": "s", "rid": "t1"})
    for rid, field in (("latest", "session_params.id"), ("by-rid", "session_params.rid")):
        reason = h.out[rid].finish
        assert reason["status_code"] == 400 and "busy" in reason["message"]
        assert reason["field"] == field
    h.run()
    assert h.out["t1"].finish_type == "length"
    ctx = tokens(0, 4) + h.out["t1"].ids
    assert turn(h, "t2", [7], 4, id="s") == reference(ctx + [7], 4)


@pytest.mark.parametrize("how", ["deadline", "abort", "queue-full"])
def test_session_a_turn_that_never_ran_leaves_the_session_at_the_turn_before(how):
    h = node(max_running_requests=1, max_queued_requests=1 if how == "queue-full" else None)
    open_session(h, "s")
    ctx = tokens(0, 4) + turn(h, "t1", tokens(0, 4), 4, id="s")
    if how == "deadline":
        h.submit("t2", tokens(50, 4), 8, session={"id": "s"}, deadline=h.clock.time() - 1)
    else:
        h.submit("busy", tokens(30, 2), 20)
        h.step()
        h.submit("queued", tokens(31, 2), 4)
        h.submit("t2", tokens(50, 4), 8, session={"id": "s"})
        if how == "abort":
            h.abort("t2")
    h.run()
    assert h.out["t2"].finish_type in ("deadline", "abort") and h.out["t2"].ids == []
    assert turn(h, "t3", [7], 4, id="s") == reference(ctx + [7], 4)


def test_session_a_retracted_turn_that_then_ends_keeps_what_it_produced():
    h = node()
    open_session(h, "s")
    ctx = tokens(0, 4) + turn(h, "t1", tokens(0, 4), 4, id="s")
    h.submit("t2", [9], 30, session={"id": "s"}, stream=True)
    h.step(6)
    h.control(PauseGenerationReq, mode="retract")
    h.abort("t2")
    partial = h.out["t2"].ids
    assert partial and h.out["t2"].finish_type == "abort"
    h.control(ContinueGenerationReq)
    assert turn(h, "t3", [7], 4, id="s") == reference(ctx + [9] + partial + [7], 4)


def test_session_a_superseding_turn_continues_from_before_the_stale_one():
    """Both slots busy, so a session turn waits; a second turn with `supersede` ends it and is
    built from the last finished turn, not from the stale one (which never ran, and as a
    parent would make the session busy)."""
    h = node(max_running_requests=2)
    open_session(h, "s")
    ctx = tokens(0, 4) + turn(h, "sup-1", tokens(0, 4), 4, id="s")
    for i in (1, 2):
        h.submit(f"busy-{i}", tokens(10 * i, 2), 30)
    h.step()
    h.submit("sup-2", tokens(40, 3), 20, session={"id": "s"}, supersede=True)
    h.submit("sup-3", tokens(60, 3), 20, session={"id": "s"}, supersede=True)
    assert h.out["sup-2"].finish_type == "superseded"
    h.run()
    prompt = ctx + tokens(60, 3)
    assert h.out["sup-3"].meta.prompt_tokens == len(prompt)
    assert h.out["sup-3"].ids == reference(prompt, 20)
    nxt = turn(h, "sup-4", [7], 4, id="s")
    assert nxt == reference(prompt + h.out["sup-3"].ids + [7], 4)


def test_session_capacity_of_str_len_bounds_the_context_and_a_refused_turn_changes_nothing():
    h = node()
    open_session(h, "s", capacity_of_str_len=20)
    ctx = tokens(0, 8) + turn(h, "cap-1", tokens(0, 8), 4, id="s")  # 12 tokens
    for k, params in enumerate(({}, {"replace": True}, {"rid": "cap-1"})):
        n_new = 21 if params.get("replace") else 9  # 12 + 9 > 20; a fresh start of 21
        h.submit(f"over-{k}", tokens(50, n_new), 4, session={"id": "s", **params})
        reason = h.out[f"over-{k}"].finish
        assert "capacity_of_str_len 20" in reason["message"]
        assert reason["field"] == "session_params.id" and reason["status_code"] == 400
    # nothing was dropped by the refused `replace`: the session continues from cap-1
    assert turn(h, "cap-2", [7], 4, id="s") == reference(ctx + [7], 4)


def test_session_idle_timeout_reaps_the_session_and_its_pins():
    h = node()
    open_session(h, "s", timeout=2)
    turn(h, "t1", tokens(0, 20), 4, id="s")
    assert kv_state(h)["pinned"] == 20 + 4 - 1
    h.clock.advance(1.5)
    h.step()
    assert h.control(GetInternalStateReq).data["open_sessions"] == 1
    h.clock.advance(1.0)
    h.step()
    state = h.control(GetInternalStateReq).data
    assert state["open_sessions"] == 0
    assert state["kv_pool"]["pinned"] == 0 and state["kv_pool"]["used"] == 0
    h.submit("late", [7], 4, session={"id": "s"})
    assert "closed" in h.out["late"].finish["message"]
    assert h.out["late"].finish["field"] == "session_params.id"


def test_session_idle_session_is_reaped_while_the_node_is_busy():
    h = node()
    open_session(h, "s", timeout=0.2)
    turn(h, "t1", tokens(0, 4), 4, id="s")
    h.submit("busy", tokens(50, 4), 300)
    h.run_until(lambda: not h.core.sessions.sessions, "reaped")
    assert h.running() == ["busy"], "the session was reaped only once the node was idle"


def test_session_pins_yield_to_a_request_that_cannot_fit_next_to_them():
    h = node()
    open_session(h, "s")
    turn(h, "pins-1", tokens(0, 200), 40, id="s")
    assert kv_state(h)["pinned"] == 239
    # 502 tokens fit the pool of 700, but not next to 239 pinned ones
    h.submit("big", tokens(300, 2), 500)
    h.submit("small", tokens(310, 2), 4)
    h.step()
    assert h.running() == ["big", "small"] and kv_state(h)["pinned"] == 0
    h.run()
    assert h.out["big"].finish_type == h.out["small"].finish_type == "length"


def test_session_pins_yield_to_a_running_request_that_runs_short_of_kv():
    """Admitted on a 20 % reserve next to 239 pinned tokens, a lone request grows past what is
    left of the pool: the pin gives way (nothing can be retracted for it) and it runs to its
    end; the session continues with its context recomputed."""
    h = node(decode_reserve_ratio=0.2)
    open_session(h, "s")
    ctx = tokens(0, 200) + turn(h, "lean-1", tokens(0, 200), 40, id="s")
    assert kv_state(h)["pinned"] == 239
    h.submit("lone", tokens(300, 2), 500)
    h.run()
    assert h.out["lone"].ids == reference(tokens(300, 2), 500)
    assert h.core.stats().num_retractions == 0 and kv_state(h)["pinned"] == 0
    assert turn(h, "lean-2", [7], 4, id="s") == reference(ctx + [7], 4)


def pressure(h: Harness, rid: str, start: int) -> None:
    """A request whose KV does not fit next to what is cached: unpinned prefixes are evicted."""
    h.submit(rid, tokens(start, 8), 480)
    h.run()
    assert h.out[rid].finish_type == "length"


def test_session_pinned_context_survives_kv_pressure_and_close_releases_it():
    h = node()
    open_session(h, "s")
    turn(h, "pin-1", tokens(0, 100), 20, id="s")
    held = 100 + 20 - 1
    prefix = [63 - i % 50 for i in range(150)]
    h.submit("prefix", prefix, 1)
    h.run()
    state = kv_state(h)
    assert state["pinned"] == held and state["cached"] == 150
    pressure(h, "pressure", 400)  # 488 tokens > 700 - 119 pinned - 150 cached
    h.submit("prefix-again", prefix, 1)
    h.run()
    assert h.out["prefix-again"].meta.cached_tokens < len(prefix) - 1, "it was evicted"
    turn(h, "pin-2", tokens(120, 4), 4, id="s")
    assert h.out["pin-2"].meta.cached_tokens == held
    assert kv_state(h)["pinned"] == held + 4 + 4
    close_session(h, "s")
    state = kv_state(h)
    assert state["pinned"] == 0 and state["used"] == 0 and state["cached"] > 0
    assert h.control(FlushCacheReq).success
    state = kv_state(h)
    assert state["cached"] == 0 and state["free"] == state["total"] == POOL


def test_session_held_tokens_bound_unpins_the_oldest_session():
    h = node()
    open_session(h, "old")
    open_session(h, "new")
    turn(h, "held-old", tokens(0, 130), 20, id="old")
    turn(h, "held-new", tokens(200, 130), 20, id="new")
    assert kv_state(h)["pinned"] == 149, "2 x 149 > 250: the older session lost its pin"
    pressure(h, "pressure", 400)
    turn(h, "held-old-2", [7, 8], 4, id="old")
    turn(h, "held-new-2", [7, 8], 4, id="new")
    assert h.out["held-old-2"].meta.cached_tokens < 149
    assert h.out["held-new-2"].meta.cached_tokens == 149


@pytest.mark.parametrize("overlap", [True, False], ids=["overlap", "plain"])
def test_session_a_turn_ended_by_a_stop_id_continues_from_what_the_client_got(overlap):
    """The overlap loop has the next token of a stopped turn in flight already: it is not part
    of the turn's output, so not of the next turn's context either."""
    h = node(disable_overlap_schedule=not overlap)
    open_session(h, "s")
    first = tokens(0, 6)
    stop = reference(first, 20)[5]
    h.submit("t1", first, sampling=greedy(20, stop_token_ids=[stop]), session={"id": "s"})
    h.run()
    ctx = first + h.out["t1"].ids
    assert h.out["t1"].ids[-1] == stop and len(h.out["t1"].ids) <= 6
    assert turn(h, "t2", [7], 4, id="s") == reference(ctx + [7], 4)
    assert h.out["t2"].meta.prompt_tokens == len(ctx) + 1
