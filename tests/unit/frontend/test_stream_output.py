"""`/generate` stream chunks as SGLang sends them: everything so far, actions per chunk."""

from __future__ import annotations

from vla_server.frontend.stream_output import CumulativeStream, stream_shaper


def delta(text: str, ids: list[int], actions: list[list[float]], **meta: object) -> dict:
    return {"text": text, "output_ids": ids, "actions": actions, "meta_info": dict(meta)}


def test_text_ids_and_logprobs_accumulate_actions_stay_new():
    shape = CumulativeStream()
    a = shape(delta("pi", [1, 2], [], num_actions=0, output_token_logprobs=[[-1, 1], [-2, 2]]))
    b = shape(delta("ck", [3], [[0.5]], num_actions=1, output_token_logprobs=[[-3, 3]]))
    assert (a["text"], a["output_ids"]) == ("pi", [1, 2])
    assert (b["text"], b["output_ids"], b["actions"]) == ("pick", [1, 2, 3], [[0.5]])
    assert b["meta_info"]["output_token_logprobs"] == [[-1, 1], [-2, 2], [-3, 3]]
    assert b["meta_info"]["num_actions"] == 1
    assert a["output_ids"] == [1, 2], "an earlier chunk is not changed by later ones"


def test_a_batch_stream_accumulates_per_prompt():
    shape = CumulativeStream()
    shape({**delta("a", [1], []), "index": 0})
    shape({**delta("x", [9], []), "index": 1})
    assert shape({**delta("b", [2], []), "index": 0})["output_ids"] == [1, 2]
    assert shape({**delta("y", [8], []), "index": 1})["text"] == "xy"


def test_incremental_streaming_output_keeps_the_deltas():
    shape = stream_shaper(incremental=True)
    chunk = delta("ck", [3], [[0.5]])
    assert shape(chunk) is chunk
