"""Pause/continue and weight updates over the rpc channel, on a live node. (A flush refused
while requests run is a unit test on the scheduling core:
tests/unit/scheduler/test_sched_control.py.)"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator

from tests.support.hf_reference import hf_greedy
from tests.support.server import run_server
from tests.support.tiny_checkpoints import make_llama

GREEDY = {"temperature": 0, "max_new_tokens": 16, "ignore_eos": True}
PROMPT = [85, 289, 430, 391, 422, 408]


def _wait_pending(c, n: int) -> None:
    deadline = time.monotonic() + 30
    while c.get("/get_server_info").json()["num_pending_requests"] != n:
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_update_weights_from_disk_serves_the_new_weights(llama_path, tmp_path):
    other = make_llama(seed=5)
    with (
        run_server(llama_path, tmp_path, "--max-total-tokens", "2048") as server,
        server.client() as c,
    ):
        before = c.post("/generate", json={"input_ids": PROMPT, "sampling_params": GREEDY}).json()
        assert before["output_ids"] == hf_greedy(llama_path, PROMPT, 16)
        r = c.post("/update_weights_from_disk", json={"model_path": str(other)})
        assert r.status_code == 200 and r.json()["success"], r.text
        after = c.post("/generate", json={"input_ids": PROMPT, "sampling_params": GREEDY}).json()
        assert after["output_ids"] == hf_greedy(other, PROMPT, 16)
        assert after["output_ids"] != before["output_ids"]
        missing = c.post("/update_weights_from_disk", json={"model_path": str(tmp_path / "nope")})
        assert missing.status_code == 400 and missing.json()["error"]["field"] == "model_path"
        bigger = make_llama(hidden_size=64, num_heads=2, num_kv_heads=1, intermediate_size=128)
        mismatch = c.post("/update_weights_from_disk", json={"model_path": str(bigger)})
        assert (
            mismatch.status_code == 400 and "different architecture" in mismatch.json()["message"]
        )
        # a refused update keeps the previous weights
        again = c.post("/generate", json={"input_ids": PROMPT, "sampling_params": GREEDY}).json()
        assert again["output_ids"] == after["output_ids"]


UPDATE_STREAM_TOKENS = 480  # long enough to be in flight when the update arrives
WAITS_LOG = "waits for 1 in-flight request(s) to finish"


async def _next_chunk(lines: AsyncIterator[str]) -> dict:
    async for line in lines:
        if line.startswith("data: {"):
            return json.loads(line[len("data: ") :])
    raise AssertionError("the stream ended without a chunk")


async def _log_shows(server, text: str) -> None:
    deadline = time.monotonic() + 60
    while text not in server.log():
        assert time.monotonic() < deadline, f"never logged {text!r}"
        await asyncio.sleep(0.01)


async def _update_during_stream(server, model_path: str) -> tuple[list[dict], dict, dict]:
    """A long stream; while it runs, a weight update and then one more request are sent."""
    sampling = {**GREEDY, "max_new_tokens": UPDATE_STREAM_TOKENS}
    body = {"input_ids": PROMPT, "stream": True, "sampling_params": sampling}
    async with server.async_client() as c, c.stream("POST", "/generate", json=body) as r:
        lines = r.aiter_lines()
        chunks = [await _next_chunk(lines)]
        update = asyncio.create_task(
            c.post("/update_weights_from_disk", json={"model_path": model_path})
        )
        await _log_shows(server, WAITS_LOG)  # it arrived while the stream held its share
        later = asyncio.create_task(
            c.post("/generate", json={"input_ids": PROMPT, "sampling_params": GREEDY})
        )
        async for line in lines:
            if line.startswith("data: {"):
                chunks.append(json.loads(line[len("data: ") :]))
        return chunks, (await update).json(), (await later).json()


def test_update_weights_waits_for_the_inflight_stream(llama_path, tmp_path):
    """The update waits for the response in flight instead of being refused or cutting it.

    The scheduler refuses an update while any request runs, so the update's success with the
    stream in flight when it came (the log line) shows it waited for the stream's end; every
    streamed token is transformers' on the old weights; a request sent while the update waited
    queues behind it (a waiting writer blocks new readers) and gets the new weights.
    """
    other = make_llama(seed=5)
    with run_server(llama_path, tmp_path, "--max-total-tokens", "2048") as server:
        chunks, update, later = asyncio.run(_update_during_stream(server, str(other)))
    assert update["success"] and update["weight_version"] == 1, update
    streamed = chunks[-1]["output_ids"]
    assert streamed == hf_greedy(llama_path, PROMPT, UPDATE_STREAM_TOKENS)
    assert chunks[-1]["meta_info"]["finish_reason"]["type"] == "length"
    assert later["output_ids"] == hf_greedy(other, PROMPT, 16)
    assert later["output_ids"] != streamed[:16]


def test_pause_abort_mode_and_continue(server):
    results: dict[str, object] = {}

    def request(name: str, body: dict) -> None:
        with server.client() as c:
            results[name] = c.post("/generate", json=body).json()

    long = {"text": "pick", "sampling_params": {"max_new_tokens": 400, "ignore_eos": True}}
    t1 = threading.Thread(target=request, args=("inflight", long))
    t1.start()
    with server.client() as c:
        _wait_pending(c, 1)
        r = c.post("/pause_generation", json={"mode": "abort"})
        assert r.status_code == 200 and r.json()["success"]
        t1.join(30)
        assert results["inflight"]["meta_info"]["finish_reason"]["type"] == "abort"
        # while paused a new request waits in the TokenizerManager, before dispatch
        t2 = threading.Thread(
            target=request, args=("queued", {"text": "pick", "sampling_params": GREEDY})
        )
        t2.start()
        _wait_pending(c, 1)
        time.sleep(0.3)
        assert "queued" not in results
        assert c.get("/get_server_info").json()["internal_states"][0]["num_waiting_reqs"] == 0
        assert c.post("/continue_generation").json()["success"]
        t2.join(30)
        assert results["queued"]["meta_info"]["finish_reason"]["type"] == "length"
        bad = c.post("/pause_generation", json={"mode": "sideways"})
        assert bad.status_code == 400 and bad.json()["error"]["field"] == "mode"
