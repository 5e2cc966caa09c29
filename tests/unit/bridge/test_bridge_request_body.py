"""The /generate body per frame, and dropping optional fields a server does not know."""

from __future__ import annotations

import numpy as np

from ros_bridge.camera_frame import raw_frame
from ros_bridge.frame_input import prepare_image
from ros_bridge.request_body import FieldSupport, RequestSettings, build_body

IMAGE = prepare_image(raw_frame("/c", 1, np.zeros((2, 2, 3), np.uint8), "rgb8"), bytes(16))


def test_multimodal_body() -> None:
    settings = RequestSettings(
        instruction="stack", unnorm_key="demo_arm", num_actions=3, priority=2, session="ep-7"
    )
    body = build_body(
        settings,
        [IMAGE, IMAGE],
        rid="r1",
        remaining_ms=123.4567,
        multimodal=True,
        support=FieldSupport(),
    )
    assert body == {
        "text": "stack",
        "stream": True,
        "rid": "r1",
        "image_data": [IMAGE.image_data, IMAGE.image_data],
        "mm_hashes": [IMAGE.mm_hash, IMAGE.mm_hash],
        "unnorm_key": "demo_arm",
        "num_actions": 3,
        "sampling_params": {"temperature": 0.0},
        "deadline_ms": 123.457,
        "priority": 2,
        "session_id": "ep-7",
        "supersede": True,
    }


def test_text_only_server_gets_no_image_fields() -> None:
    body = build_body(
        RequestSettings(),
        [IMAGE],
        rid="r",
        remaining_ms=-5.0,
        multimodal=False,
        support=FieldSupport({"deadline_ms"}),
    )
    assert body == {
        "text": "pick up the cube",
        "stream": True,
        "rid": "r",
        "sampling_params": {"temperature": 0.0, "max_new_tokens": 8},
    }


def test_hashes_left_out_until_every_image_has_one() -> None:
    unhashed = IMAGE.with_digest(None)
    body = build_body(
        RequestSettings(),
        [IMAGE, unhashed],
        rid="r",
        remaining_ms=1.0,
        multimodal=True,
        support=FieldSupport(),
    )
    assert "mm_hashes" not in body


def test_field_support_drops_optional_fields_once() -> None:
    support = FieldSupport()
    assert support.reject("session_id")
    assert not support.reject("session_id")  # already dropped: a real error now
    assert not support.reject("image_data")  # not optional: never dropped
    assert not support.reject(None)
    body = build_body(
        RequestSettings(session="s"),
        [IMAGE],
        rid="r",
        remaining_ms=1.0,
        multimodal=True,
        support=support,
    )
    assert "session_id" not in body and body["supersede"] is True


def test_instruction_first_images_last_with_the_servers_placeholder() -> None:
    body = build_body(
        RequestSettings(instruction="stack"),
        [IMAGE, IMAGE],
        rid="r",
        remaining_ms=1.0,
        multimodal=True,
        support=FieldSupport(),
        image_token="<image>",
    )
    assert body["text"] == "stack\n<image><image>"
