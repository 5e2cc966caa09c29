"""The offline Python API: `vla_server.Engine` with generate / stream / async_generate."""

from __future__ import annotations

import asyncio

import psutil
import pytest

import vla_server
from vla_server.errors import RequestError

GREEDY = {"temperature": 0, "max_new_tokens": 10, "ignore_eos": True}


@pytest.fixture(scope="module")
def engine(llama_path):
    with vla_server.Engine(model_path=str(llama_path), max_total_tokens=2048) as eng:
        yield eng


def test_generate_stream_and_batch(engine):
    out = engine.generate(text="pick up the cube", sampling_params=GREEDY)
    assert out["meta_info"]["completion_tokens"] == 10 and len(out["output_ids"]) == 10
    chunks = list(engine.generate(text="pick up the cube", sampling_params=GREEDY, stream=True))
    # As SGLang streams by default: each chunk carries everything generated so far.
    assert chunks[-1]["text"] == out["text"] and chunks[-1]["output_ids"] == out["output_ids"]
    for a, b in zip(chunks, chunks[1:], strict=False):
        assert b["output_ids"][: len(a["output_ids"])] == a["output_ids"]
        assert b["text"].startswith(a["text"])
    batch = engine.generate(text=["pick up the cube", "open"], sampling_params=GREEDY)
    assert batch[0]["output_ids"] == out["output_ids"] and len(batch) == 2


def test_async_generate_from_another_loop(engine):
    async def main() -> tuple[dict, list[dict]]:
        single = await engine.async_generate(text="open the drawer", sampling_params=GREEDY)
        stream = await engine.async_generate(
            text="open the drawer", sampling_params=GREEDY, stream=True
        )
        chunks = [c async for c in stream]
        return single, chunks

    single, chunks = asyncio.run(main())
    assert chunks[-1]["output_ids"] == single["output_ids"]


def test_bad_input_raises_and_leaves_nothing(engine):
    with pytest.raises(RequestError) as e:
        engine.generate(text="a", sampling_params={"top_k": 0})
    assert e.value.field == "sampling_params.top_k"
    with pytest.raises(RequestError):
        engine.generate(text="a", unknown_field=1)
    assert engine.tokenizer_manager.rid_to_state == {}
    assert engine.get_server_info()["kv_pool"]["used"] == 0


def test_stream_closed_early_aborts_in_the_scheduler(engine):
    stream = engine.generate(
        text="pick", sampling_params={"max_new_tokens": 500, "ignore_eos": True}, stream=True
    )
    next(stream)
    stream.close()
    for _ in range(200):
        state = engine.get_server_info()
        if state["num_running_reqs"] == 0 and not engine.tokenizer_manager.rid_to_state:
            break
        asyncio.run(asyncio.sleep(0.02))
    assert state["num_running_reqs"] == 0 and state["kv_pool"]["used"] == 0


def test_shutdown_stops_the_children(llama_path):
    eng = vla_server.Engine(model_path=str(llama_path), max_total_tokens=512)
    kids = [psutil.Process(p.pid) for p in eng.node.procs]
    eng.shutdown()
    _, alive = psutil.wait_procs(kids, timeout=5)
    assert not alive
    eng.shutdown()  # idempotent
