"""SGLang's action payloads -> the node's action request, without a node: both forms, the four
image encodings, SGLang's knob precedence, and errors naming the payload's own paths."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.images import png_base64, random_rgb
from vla_server.errors import RequestError
from vla_server.frontend.sglang_action_policy import ServedPolicy
from vla_server.frontend.sglang_action_wire import sglang_ask

POLICY = ServedPolicy(
    cameras=("base_0_rgb", "wrist_0_rgb"),
    state_dim=4,
    action_dim=3,
    padded_action_dim=32,
    action_horizon=4,
    num_inference_steps=10,
    family="pi05",
    stats=None,
)
FRAME = random_rgb(6, 5, seed=3)
STATE = [0.1, 1.0, -0.5, 2.0]


def test_the_envelope_and_the_flat_form_ask_the_same():
    envelope = {
        "request_id": "r-1",
        "input": {"task": "pick", "observation": {"images": {"base_0_rgb": FRAME.tolist()}}},
        "parameters": {"seed": 5, "num_inference_steps": 10},
        "runtime": {"response_format": "raw", "prefix_cache": "auto"},
    }
    envelope["input"]["state"] = STATE
    flat = {
        "prompt": "pick",
        "observation.images.base_0_rgb": FRAME,
        "observation.state": np.asarray(STATE),
        "seed": 5,
        "enable_pi_cuda_graph": True,
        "runtime": {"response_format": "raw"},
    }
    a, b = sglang_ask(envelope, POLICY), sglang_ask(flat, POLICY, "numpy")
    for ask in (a, b):
        assert (ask.body.instruction, ask.body.state, ask.body.seed) == ("pick", STATE, 5)
        np.testing.assert_array_equal(ask.body.image_data["base_0_rgb"], FRAME)
        assert ask.response_format == "raw" and not ask.client_normalized
    assert (a.request_id, a.output_format, b.output_format) == ("r-1", "list", "numpy")


@pytest.mark.parametrize(
    "image",
    [
        FRAME.tolist(),
        {"dtype": "uint8", "shape": [6, 5, 3], "values": FRAME.reshape(-1).tolist()},
        FRAME.transpose(2, 0, 1),  # CHW
        FRAME.astype(np.float32),  # over 2: [0, 255], SGLang's rule
        FRAME.astype(np.float32) / 255.0,
    ],
)
def test_pixel_encodings_give_the_same_frame(image):
    ask = sglang_ask({"task": "t", "images": {"wrist_0_rgb": image}}, POLICY)
    np.testing.assert_array_equal(ask.body.image_data["wrist_0_rgb"], FRAME)


def test_base64_images_go_to_the_node_decoder():
    data = "data:image/png;base64," + png_base64(FRAME)
    ask = sglang_ask({"task": "t", "images": {"base_0_rgb": {"b64_json": data}}}, POLICY)
    assert ask.body.image_data == {"base_0_rgb": data}
    assert ask.paths["image_data[0]"] == "images.base_0_rgb"


BAD = [
    ({"input": {"task": "t", "observation": {"images": {"cam_high": [[[1, 2, 3]]]}}}},
     "input.observation.images.cam_high"),
    ({"task": "t", "observation.images.cam_low": FRAME}, "observation.images.cam_low"),
    ({"task": "t", "state": [1.0]}, "state"),
    ({"input": {"observation": {}}}, "input.task"),
    ({"task": "t", "parameters": {"num_inference_steps": 4}}, "parameters.num_inference_steps"),
    ({"task": "t", "parameters": {"guidance_scale": 2.0}}, "parameters.guidance_scale"),
    ({"task": "t", "runtime": {"output_format": "torch"}}, "runtime.output_format"),
    ({"task": "t", "image_masks": {"base_0_rgb": True}}, "image_masks"),
    ({"task": "t", "action_dim": 7}, "action_dim"),
    ({"task": "t", "observation.noise": {"dtype": "U9", "values": ["x"]}}, "observation.noise"),
    ({"task": "t", "images": {"base_0_rgb": [[[300, 0, 0]]]}}, "images.base_0_rgb"),
    ({"task": "t", "typo": 1}, "typo"),
]  # fmt: skip


@pytest.mark.parametrize(("payload", "field"), BAD)
def test_errors_name_the_payloads_field(payload, field):
    with pytest.raises(RequestError) as e:
        sglang_ask(payload, POLICY)
    assert e.value.field == field, e.value.message


def test_node_errors_are_renamed_to_the_payloads_paths():
    ask = sglang_ask({"input": {"task": "t", "observation": {"state": STATE}}}, POLICY)
    renamed = ask.rename(RequestError("has 9 values", "state"))
    assert (renamed.field, renamed.message) == ("input.observation.state", "has 9 values")
    assert ask.rename(RequestError("x", "noise")).field == "input.observation.noise"
