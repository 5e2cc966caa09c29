"""The state token's placeholder id (`frontend/state_pad.py`): derived from the normalised
state's bytes, in the image pad ids' range, so the radix cache keys the position by the state."""

from __future__ import annotations

import numpy as np
import pytest

from vla_server.frontend.state_pad import state_pad_id, with_state_pad_id

VOCAB = 400


def test_the_id_is_the_states_bytes():
    a = np.array([0.1, -2.0, 0.0, 3.5], dtype=np.float32)
    same = np.array([0.1, -2.0, 0.0, 3.5], dtype=np.float32)
    moved = a.copy()
    moved[2] = np.nextafter(np.float32(0.0), np.float32(1.0))  # one ulp away
    assert state_pad_id(a, VOCAB) == state_pad_id(same, VOCAB)
    assert state_pad_id(a, VOCAB) != state_pad_id(moved, VOCAB)
    assert state_pad_id(a, VOCAB) != state_pad_id(a.astype(np.float64), VOCAB)
    for state in (a, moved):
        assert VOCAB <= state_pad_id(state, VOCAB) < VOCAB + 2**62


def test_written_at_the_position_only():
    state = np.zeros(3, dtype=np.float32)
    ids = [5, 6, 7, 8]
    out = with_state_pad_id(ids, 3, state, VOCAB)
    assert out[:3] == ids[:3] and out[3] == state_pad_id(state, VOCAB) and ids == [5, 6, 7, 8]
    assert with_state_pad_id(ids, None, None, VOCAB) is ids


def test_vocab_out_of_range_is_refused():
    with pytest.raises(ValueError, match="vocab_size"):
        state_pad_id(np.zeros(2, dtype=np.float32), 0)
