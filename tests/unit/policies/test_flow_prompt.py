"""pi0's and pi0.5's prompts and state handling on the tiny LeRobot checkpoints, against the
spec's formulas written out here: pi0 = `<bos>` + task + "\\n" (its state goes to the state token,
LeRobot's mean-std normalisation, zero-padded); pi0.5 = `<bos>Task: {task}, State: {bins};\\n
Action: ` with the bins `np.digitize` over 256 bins of [-1, 1] of the quantile-normalised state,
not clipped."""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import load_file

from tests.support.families import family_tokenizer
from vla_server.policies.pi0.prompt import flow_prompt_text
from vla_server.policies.pi0.tiny import pi0_model_path
from vla_server.policies.registry import detect


def _state_stats(folder) -> dict[str, np.ndarray]:
    steps = json.loads((folder / "policy_preprocessor.json").read_text())["steps"]
    flat = load_file(str(folder / next(s["state_file"] for s in steps if "state_file" in s)))
    prefix = "observation.state."
    return {k[len(prefix) :]: v for k, v in flat.items() if k.startswith(prefix)}


@pytest.mark.parametrize("convention", ["lerobot", "openpi"])
@pytest.mark.parametrize("kind", ["pi0", "pi05"])
def test_prompt_bytes(kind, convention):
    folder = pi0_model_path(kind, "bare")
    policy, tokenizer = detect(folder).policy(), family_tokenizer(folder)
    state = [-3.0, 1.0, 0.25, 9.0]  # the first below the statistics' range, the last above
    instruction = "  Open the top_drawer\n"
    text = flow_prompt_text(policy, instruction, state, convention)
    if kind == "pi0":
        # LeRobot 0.6.1's pi0 processor appends "\n" to the task as given; openpi cleans it.
        cleaned = "Open the top drawer"
        assert text == (instruction if convention == "lerobot" else cleaned) + "\n"
    else:
        stats = _state_stats(folder)
        normed = (np.asarray(state, np.float32) - stats["q01"]) / (stats["q99"] - stats["q01"])
        bins = np.digitize(normed * 2 - 1, np.linspace(-1, 1, 257)[:-1]) - 1
        assert bins[0] == -1 and bins[-1] == 255
        assert text == f"Task: Open the top drawer, State: {' '.join(map(str, bins))};\nAction: "
    ids = tokenizer(text)["input_ids"]
    assert ids[0] == tokenizer.bos_token_id
    if "_" not in text:  # the tiny vocabulary has no "_" (it reads as <unk>)
        assert tokenizer.decode(ids[1:]) == text


def test_pi0_state_vector_is_mean_std_normalised_and_zero_padded():
    folder = pi0_model_path("pi0", "bare")
    policy = detect(folder).policy()
    stats = _state_stats(folder)
    state = [0.5, -1.0, 2.0, 3.5]
    vector = policy.state_vector(state)
    expected = (np.asarray(state, np.float32) - stats["mean"]) / (stats["std"] + 1e-8)
    assert vector.shape == (32,) and not vector[4:].any()
    np.testing.assert_allclose(vector[:4], expected, rtol=0, atol=1e-6)
    assert not policy.state_in_prompt
