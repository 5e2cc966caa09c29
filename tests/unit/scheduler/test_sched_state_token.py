"""The state token's wire fields at intake (`scheduler/intake.py`): a request that names a
prompt position for its state is refused, naming the field, when the model's head does not
embed a state there, when the state is missing, or when the position is outside the prompt;
nothing of it stays behind."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.sched_fakes import BOS, Harness, greedy
from vla_server.io_struct import Tensor
from vla_server.policies.base import Denoise

IDS = [BOS, *range(3, 12)]
STATE = Tensor.from_numpy(np.zeros(4, dtype=np.float32))


@pytest.mark.parametrize(
    ("state_token", "fields", "named"),
    [
        (False, {"state": STATE, "state_position": len(IDS) - 1}, "state_position"),
        (True, {"state_position": len(IDS) - 1}, "state"),
        (True, {"state": STATE, "state_position": len(IDS)}, "state_position"),
        (True, {"state": STATE, "state_position": -1}, "state_position"),
    ],
)
def test_a_state_position_the_model_cannot_embed_is_refused(state_token, fields, named):
    h = Harness(prefix_lm=True, head=Denoise(5, 6, 10, state_token=state_token))
    try:
        h.submit("r", IDS, sampling=greedy(0, seed=1), num_actions=5,
                 prefix_lm_len=len(IDS) - 1, **fields)  # fmt: skip
        h.run()
        finish = h.out["r"].finish
        assert finish["type"] == "abort" and finish["status_code"] == 400, finish
        assert finish["field"] == named, finish
        h.assert_clean()
    finally:
        h.close()
