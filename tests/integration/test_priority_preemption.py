"""Priority preemption through a live node (`--max-running-requests 4`, priority scheduling
on): a more important request preempts a running one by retraction within one scheduling step,
the retracted request still ends with the greedy output it has alone, and the retraction counts
of the responses, the internal state and Prometheus agree.

The rules themselves (the threshold, disabled preemption, low values first, the queue bound, KV
pressure) are unit tests on the scheduling core:
tests/unit/scheduler/test_sched_priority_preempt.py.

`meta_info.queue_steps` is the number of batches the scheduler launched between ingesting the
request and launching the batch that carries its first prefill chunk; 0 means the request rode
the very first batch built after its arrival. The test waits only for states that stay true:
every low request has streamed its first token (it runs in the scheduler, with hundreds of
tokens to go) before the high one is sent.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.support.async_node import (
    POLL_TIMEOUT_S,
    body,
    finish_type,
    internal,
    json_of,
    meta,
    metric,
    outputs_alone,
    stream_until_done,
    wait_idle,
)
from tests.support.server import run_server

LOW_NEW = 440  # long enough to keep the 4 slots busy while the test acts (context 512)
LOWS = [[20 + i, 31, 47, 52 + i, 60] for i in range(4)]
HIGH = [200, 201, 202, 7, 9]


@pytest.fixture(scope="module")
def node(llama_path, tmp_path_factory):
    with run_server(
        llama_path,
        tmp_path_factory.mktemp("prio"),
        "--max-running-requests",
        str(len(LOWS)),
        "--enable-priority-scheduling",
        "--max-total-tokens",
        "4096",
    ) as s:
        yield s


async def test_high_priority_preempts_within_one_step(node):
    async with node.async_client() as c:
        alone = await outputs_alone(c, LOWS, LOW_NEW)
        before = (await internal(c))["num_retractions"]
        started = [asyncio.Event() for _ in LOWS]
        lows = [
            asyncio.create_task(stream_until_done(c, body(ids, LOW_NEW, priority=0), ev))
            for ids, ev in zip(LOWS, started, strict=True)
        ]
        # a liveness bound, not a latency threshold
        await asyncio.wait_for(asyncio.gather(*(ev.wait() for ev in started)), POLL_TIMEOUT_S)
        hi = await json_of(c.post("/generate", json=body(HIGH, 16, priority=100)))
        outs = await asyncio.gather(*lows)
        after = await wait_idle(c)
        gauge = await metric(c, "vla_num_retractions")
    assert meta(hi)["queue_steps"] == 0, meta(hi)
    assert finish_type(hi) == "length"
    retracted = [o for o in outs if meta(o)["num_retractions"] >= 1]
    assert retracted, "a running low-priority request should have been preempted"
    assert after["num_retractions"] - before == sum(meta(o)["num_retractions"] for o in outs)
    assert gauge == after["num_retractions"]
    # Every low request, the retracted ones recomputed from their prefix, ends as if alone.
    assert [o["output_ids"] for o in outs] == alone
    assert all(finish_type(o) == "length" for o in outs)
    assert after["kv_pool"]["used"] == 0
