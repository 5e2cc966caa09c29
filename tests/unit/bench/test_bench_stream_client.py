"""The benchmarks' chunk timing: interval arithmetic, and a scripted stream on a stepped clock."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from vla_server.bench import stream_client
from vla_server.bench.stream_client import timed_stream, token_intervals


def test_intervals_split_a_coalesced_chunk_evenly():
    # Chunks at 0 s (1 token: the prefill's), 1 s (1), 3 s (2 tokens), 3.5 s (1).
    arrivals = [(0.0, 1), (1.0, 1), (3.0, 2), (3.5, 1)]
    assert token_intervals(arrivals) == [1.0, 1.0, 1.0, 0.5]


@given(
    st.lists(
        st.tuples(st.floats(0, 10, allow_nan=False), st.integers(1, 4)), min_size=1, max_size=20
    )
)
def test_intervals_cover_the_decode_time_once(steps):
    times = [sum(dt for dt, _ in steps[: i + 1]) for i in range(len(steps))]
    arrivals = [(t, n) for t, (_, n) in zip(times, steps, strict=True)]
    gaps = token_intervals(arrivals)
    assert len(gaps) == sum(n for _, n in steps[1:])
    assert math.isclose(sum(gaps), times[-1] - times[0], abs_tol=1e-9)


async def test_timed_stream_times_each_chunk_on_arrival(monkeypatch: pytest.MonkeyPatch):
    chunks = [  # as the node streams them: the ids so far
        {"output_ids": [5]},
        {"output_ids": [5]},  # carries no new token: no interval ends here
        {"output_ids": [5, 6, 7]},
        {"output_ids": [5, 6, 7, 8], "actions": [[0.1]]},
    ]
    lines = [f"data: {json.dumps(c)}\n\n" for c in chunks] + ["data: [DONE]\n\n"]
    seen: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(200, content="".join(lines).encode())

    # Read once at the start, once per data line (not for [DONE]), once at the end.
    clock = iter([0.0, 1.0, 2.0, 4.0, 5.0, 6.0])
    monkeypatch.setattr(stream_client, "time", SimpleNamespace(perf_counter=lambda: next(clock)))
    transport = httpx.MockTransport(handler)
    async with httpx.AsyncClient(transport=transport, base_url="http://node") as client:
        timing = await timed_stream(client, {"input_ids": [1, 2]})

    assert seen == [{"input_ids": [1, 2], "stream": True}]
    assert timing.ttft == 1.0 and timing.e2e == 6.0
    # 1 s -> 4 s brought two tokens: 1.5 s each; 4 s -> 5 s one token.
    assert timing.itls == [1.5, 1.5, 1.0]
    assert timing.tokens == 4 and timing.output_ids == [5, 6, 7, 8]
    assert timing.actions_at == [5.0] and timing.last == chunks[-1]
