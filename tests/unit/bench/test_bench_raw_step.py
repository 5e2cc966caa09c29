"""The decode rig behind `bench`'s raw step and lane floor: a model loaded once that decodes
round after round, each round from fresh prompts in an emptied KV pool, as transformers does."""

from __future__ import annotations

import pytest

from tests.support.hf_reference import hf_greedy
from tests.support.tiny_checkpoints import make_llama
from vla_server.bench.raw_step import DecodeRig

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_every_round_decodes_fresh_prompts_like_transformers() -> None:
    path = make_llama()
    rig = DecodeRig(path, batch_size=2, max_steps=8, prompt_len=5)
    expected = [hf_greedy(path, [(7 * i + j) % 200 + 10 for j in range(5)], 5) for i in range(2)]
    for _ in range(3):  # a round that reused the last one's KV would attend to stale tokens
        times = rig.round(steps=3, warmup=1)
        assert len(times) == 3
        assert rig.outputs == expected
