"""SSE parsing: valid events in order, malformed lines counted and skipped, never raised."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from ros_bridge.sse import DONE, SseParser, StreamChunk, parse_chunk


def chunk_json(ids: list[int], actions: list[list[float]] | None = None, finish=None) -> str:
    """An event as the node streams it: text and ids so far, the actions completed since."""
    body = {"text": "x" * len(ids), "output_ids": ids, "meta_info": {"finish_reason": finish}}
    if actions is not None:
        body["actions"] = actions
    return json.dumps(body)


def feed_all(parser: SseParser, lines: list[str]) -> list[StreamChunk | str]:
    out: list[StreamChunk | str] = []
    for line in lines:
        out += parser.feed(line)
    return out + parser.finish()


def test_server_stream_shape() -> None:
    parser = SseParser()
    lines = [
        "data: " + chunk_json([5]),
        "",
        ": keep-alive comment",
        "data: " + chunk_json([5, 6, 7], [[0.5, -1.0], [2, 3]], {"type": "length"}),
        "",
        "data: [DONE]",
        "",
    ]
    first, second, done = feed_all(parser, lines)
    assert first.n_tokens == 1 and first.actions == () and first.text == "x"
    assert (
        second.n_tokens == 2 and second.text == "xx" and second.actions == ((0.5, -1.0), (2.0, 3.0))
    )
    assert second.finish_reason == {"type": "length"}
    assert done == DONE and parser.malformed == 0


def test_multiline_data_joins_with_newline_and_other_fields_are_ignored() -> None:
    parser = SseParser()
    lines = ["event: chunk", "id: 3", 'data: {"output_ids": [1, 2],', 'data:"text": "ab"}', ""]
    (chunk,) = feed_all(parser, lines)
    assert chunk.n_tokens == 2 and chunk.text == "ab" and parser.malformed == 0


def test_malformed_lines_are_counted_and_skipped() -> None:
    parser = SseParser()
    lines = [
        "garbage without a colon",
        "datum: {}",  # unknown field name
        "data: {not json",
        "",
        "data: [1, 2]",  # JSON, but not an object
        "",
        'data: {"output_ids": [1], "actions": [[1.0, "x"]]}',  # a non-number action value
        "",
        'data: {"output_ids": [1], "actions": [[1.0, NaN]]}',  # NaN is not an action
        "",
        "data: " + chunk_json([9]),
        "",
    ]
    out = feed_all(parser, lines)
    assert parser.malformed == 6
    assert [c.n_tokens for c in out] == [1]


def test_event_left_open_at_end_of_stream_is_dispatched() -> None:
    parser = SseParser()
    assert feed_all(parser, ["data: [DONE]"]) == [DONE]


def test_parse_chunk_types() -> None:
    assert parse_chunk({"output_ids": [1, 2], "actions": []}).n_tokens == 2
    assert parse_chunk({"output_ids": "12"}) is None
    assert parse_chunk({"meta_info": {"finish_reason": "stop"}}) is None
    assert parse_chunk({"actions": [[]]}) is None
    assert parse_chunk({"actions": [[True]]}) is None


@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("ok"), st.integers(0, 5)),
            st.tuples(st.just("bad"), st.sampled_from(["nope", "foo: bar", "data: {", "data: 3"])),
        ),
        max_size=30,
    )
)
def test_any_mix_of_valid_and_broken_events(events: list[tuple[str, object]]) -> None:
    parser = SseParser()
    lines: list[str] = []
    total = 0
    for kind, value in events:
        if kind == "ok":
            total += value  # type: ignore[operator]
            lines += ["data: " + chunk_json(list(range(total))), ""]
        else:
            lines += [value, ""]  # type: ignore[list-item]
    out = feed_all(parser, lines)
    assert [c.n_tokens for c in out] == [v for k, v in events if k == "ok"]
    assert parser.malformed == sum(1 for k, _ in events if k == "bad")
