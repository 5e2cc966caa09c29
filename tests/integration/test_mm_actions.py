"""Action decoding through the server on the demo VLA, against OpenVLA's published formula.

The reference (`tests.support.actions.openvla_actions`) is written from OpenVLA's
`ActionTokenizer.decode_token_ids_to_actions` and `OpenVLAForActionPrediction.predict_action`.
`vocab_size` is the tokenizer's size (`len(tokenizer)`: the demo's bins are its last ids), read
from the folder with transformers, and the statistics are read from the folder's
`action_tokenizer.json` directly.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from tests.support.actions import Demo, openvla_actions
from tests.support.server import metric_value, run_server
from tests.support.sse import stream_generate
from vla_server.policies.llava.demo import demo_model_path

UNNORM_KEYS = ["demo_arm", "aloha_left"]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    path = demo_model_path()
    with run_server(path, tmp_path_factory.mktemp("demo-actions")) as server:
        yield Demo(path, server)


async def post_all(server: Any, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    async with server.async_client() as client:
        replies = await asyncio.gather(*(client.post("/generate", json=b) for b in bodies))
    for r in replies:
        assert r.status_code == 200, r.text
    return [r.json() for r in replies]


def test_actions_equal_the_openvla_formula_for_each_unnorm_key(demo):
    # The checkpoint's bins are the last n_bins ids of the tokenizer (what OpenVLA assumes).
    assert demo.spec["bin_token_ids"]["first"] == demo.first_bin
    seeds = [1, 2, 3]
    greedy = [demo.body(s, key, 12) for s in seeds for key in UNNORM_KEYS]
    # Near-uniform sampling over the bins (16 x 112 draws) reaches both ends of the range,
    # where the clipping (first bin id) and the top bin (last id) are decoded.
    sampled = [
        demo.body(4, UNNORM_KEYS[i % 2], 16, sampling_params={"temperature": 50.0, "seed": i})
        for i in range(16)
    ]
    outs = asyncio.run(post_all(demo.server, greedy + sampled))
    all_ids: set[int] = set()
    for body, out in zip(greedy + sampled, outs, strict=True):
        ids = out["output_ids"]
        assert len(ids) == body["num_actions"] * demo.spec["action_dim"]
        assert all(demo.first_bin <= t < demo.vocab_size for t in ids), "sampling unconstrained"
        assert out["meta_info"]["num_actions"] == body["num_actions"]
        want = openvla_actions(ids, demo.vocab_size, demo.spec, body["unnorm_key"])
        np.testing.assert_allclose(np.asarray(out["actions"]), want, rtol=0, atol=1e-12)
        all_ids.update(ids)
    # The key changes only the un-normalisation, never the tokens.
    for i in range(0, len(greedy), 2):
        assert outs[i]["output_ids"] == outs[i + 1]["output_ids"]
        assert outs[i]["actions"] != outs[i + 1]["actions"]
    assert {demo.first_bin, demo.vocab_size - 1} <= all_ids, "both ends of the bins decoded"
    assert len(all_ids) > demo.spec["n_bins"] // 2


def test_padded_vocabulary_trap(demo):
    """The right base is len(tokenizer); the model's padded vocabulary (or HF's BPE-only
    `tokenizer.vocab_size`) in the same formula gives other actions than the server's."""
    info = demo.server.client().get("/get_model_info").json()
    assert info["vocab_size"] == demo.padded_vocab_size > demo.vocab_size > demo.base_vocab_size
    (out,) = asyncio.run(post_all(demo.server, [demo.body(5, "demo_arm", 8)]))
    served = np.asarray(out["actions"])
    ids = out["output_ids"]
    np.testing.assert_allclose(
        served, openvla_actions(ids, demo.vocab_size, demo.spec, "demo_arm"), rtol=0, atol=1e-12
    )
    for wrong in (demo.padded_vocab_size, demo.base_vocab_size):
        trapped = openvla_actions(ids, wrong, demo.spec, "demo_arm")
        assert not np.allclose(trapped, served), f"vocab_size {wrong} should shift the bins"


def test_stream_delivers_each_action_when_its_last_token_arrives(demo):
    dim, n_actions = demo.spec["action_dim"], 8
    ttfa_before = metric_value(demo.server, "vla_time_to_first_action_seconds_count")
    chunks = stream_generate(demo.server, demo.body(6, "aloha_left", n_actions))
    ids: list[int] = []
    actions: list[list[float]] = []
    partial = 0  # chunks that end inside an action: proof the stream is finer than actions
    for chunk in chunks:
        assert chunk["output_ids"][: len(ids)] == ids  # the ids so far, as SGLang streams
        ids = chunk["output_ids"]
        actions += chunk["actions"]  # only the actions completed since the previous chunk
        meta = chunk["meta_info"]
        assert meta["completion_tokens"] == len(ids)
        # Every action whose last token has arrived is in this chunk or an earlier one, and
        # none arrives before its last token.
        assert len(actions) == len(ids) // dim == meta["num_actions"], meta
        partial += len(ids) % dim != 0
    assert (
        len(actions) == n_actions and chunks[-1]["meta_info"]["finish_reason"]["type"] == "length"
    )
    assert partial > 0, "the stream coalesced everything into whole actions"
    np.testing.assert_allclose(
        np.asarray(actions),
        openvla_actions(ids, demo.vocab_size, demo.spec, "aloha_left"),
        rtol=0,
        atol=1e-12,
    )
    ttfa_after = metric_value(demo.server, "vla_time_to_first_action_seconds_count")
    assert ttfa_after == ttfa_before + 1
