"""pi0-FAST's inputs: LeRobot's resize-with-pad against the test-only transcription of
`resize_with_pad_torch`, the policy config's cameras and defaults, and the two prompt
conventions (tests/support/pi0fast_reference.py writes the reference prompts)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.support import pi0fast_reference as ref
from tests.support.families import family_tokenizer
from tests.support.images import random_rgb
from vla_server.policies.pi0fast.prompt import Pi0FastPrompt
from vla_server.policies.pi0fast.tiny import pi0fast_model_path
from vla_server.policies.pi_common.lerobot_config import LeRobotPolicySpec
from vla_server.policies.pi_common.pad_resize import PadResize, pad_resize
from vla_server.policies.pi_common.paligemma_config import paligemma_config
from vla_server.policies.pi_common.tiny_paligemma import CAMERAS
from vla_server.policies.registry import detect


@pytest.mark.parametrize("hw", [(28, 28), (40, 60), (90, 50), (13, 7), (224, 224), (480, 640)])
def test_pad_resize_is_lerobots(hw):
    frame = random_rgb(*hw, seed=sum(hw))
    for size in ((28, 28), (224, 224)):
        ours = pad_resize(frame, PadResize(*size))
        torch.testing.assert_close(torch.from_numpy(ours), ref.lerobot_pixels(frame, *size))
        assert ours.dtype == np.float32 and ours.flags.c_contiguous
        assert ours.min() >= -1.0 and ours.max() <= 1.0


def test_a_wide_frame_is_padded_black_top_and_bottom():
    ours = pad_resize(np.full((10, 40, 3), 255, np.uint8), PadResize(28, 28))
    white = np.isclose(ours, 1.0, atol=1e-6).all(axis=(0, 2))
    black = (ours == -1.0).all(axis=(0, 2))
    rows = np.flatnonzero(white)
    assert 6 <= len(rows) <= 7 and (np.diff(rows) == 1).all()  # 10 rows scaled by 28/40
    assert black.sum() == 28 - len(rows) and abs(rows[0] - (27 - rows[-1])) <= 1  # centred


def test_the_policy_config_and_the_preprocessor_of_the_folder():
    folder = pi0fast_model_path("bare")
    spec = detect(folder).spec
    assert spec.cameras == CAMERAS and spec.state_dim == 4 and spec.action_dim == 3
    assert detect(folder).image_preprocessor("pil") == PadResize(28, 28)
    minimal = LeRobotPolicySpec.from_config({
        "type": "pi0_fast",
        "input_features": {"observation.images.top": {"type": "VISUAL", "shape": [3, 224, 224]}},
        "output_features": {"action": {"type": "ACTION", "shape": [7]}},
    })  # fmt: skip
    assert minimal.max_decoding_steps == 256 and minimal.fast_skip_tokens == 128
    assert minimal.chunk_size == 50 and minimal.state_dim == 0
    real = paligemma_config(minimal)  # the named variant, as lerobot/pi0fast-base has
    text, vision = real.text_config, real.vision_config
    assert (text.hidden_size, text.num_hidden_layers, text.intermediate_size) == (2048, 18, 16384)
    assert (text.num_attention_heads, text.num_key_value_heads, text.head_dim) == (8, 1, 256)
    assert text.vocab_size == 257152 and real.image_token_id == 257152
    assert (vision.hidden_size, vision.num_hidden_layers, vision.intermediate_size) == (
        1152,
        27,
        4304,
    )
    assert (vision.patch_size, vision.image_size, vision.vision_use_head) == (14, 224, False)
    with pytest.raises(ValueError, match="camera"):
        LeRobotPolicySpec.from_config({"type": "pi0_fast", "output_features": {}})


@pytest.mark.parametrize("convention", ["lerobot", "openpi"])
def test_prompt_conventions(convention):
    tokenizer = family_tokenizer(pi0fast_model_path("bare"))
    prompt = Pi0FastPrompt.create(tokenizer, convention)
    instruction, bins = " Stack_the Cup\non it ", [-1, 0, 128, 255]
    text_ids = tokenizer(prompt.task_text(instruction, bins))["input_ids"]
    expected = ref.prompt_ids(tokenizer, instruction, bins, convention)
    assert text_ids + prompt.action_tail() == expected
    assert prompt.causal_tokens == len(tokenizer("Action: ", add_special_tokens=False)["input_ids"])
    assert prompt.position_shift == (1 if convention == "openpi" else 0)
    assert detect(pi0fast_model_path("bare")).convention("auto") == "lerobot"
