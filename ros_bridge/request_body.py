"""The `/generate` body the bridge sends for one frame (ROS-free).

Scheduling fields (`priority`, `deadline_ms`, `control_period_ms`, `supersede`, `session_id`)
are newer than the image/action API, and the server answers an unknown field with a 400 naming
it. The bridge therefore sends them optimistically and, on such a 400, drops the named field for
good (`FieldSupport.reject`) and resends: it works with servers before and after the scheduler.
Real-time chunking's fields are not optional: a server or model without them is refused loudly
(executor `rtc` needs a flow policy).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ros_bridge.chunk_executor import RtcGuidance
from ros_bridge.frame_input import PreparedImage

OPTIONAL_FIELDS = frozenset(
    {"priority", "deadline_ms", "control_period_ms", "supersede", "session_id"}
)
TEXT_ONLY_MAX_NEW_TOKENS = 8


@dataclass(frozen=True)
class RequestSettings:
    instruction: str = "pick up the cube"
    unnorm_key: str = ""
    num_actions: int = 1
    priority: int = 0
    session: str = ""
    max_new_tokens: int = 0  # 0: the server's choice (num_actions * action_dim)
    temperature: float = 0.0
    # The spacing of a chunk's actions: with the deadline (the chunk's last action's) it tells
    # the server when each action is due, so it keeps a chunk whose next actions can be on time.
    control_period_ms: float = 0.0


@dataclass
class FieldSupport:
    unsupported: set[str] = field(default_factory=set)

    def reject(self, field_path: str | None) -> bool:
        """Records a 400 on `field_path`; True if that was an optional field (resend without)."""
        root = (field_path or "").split(".")[0].split("[")[0]
        if root in OPTIONAL_FIELDS and root not in self.unsupported:
            self.unsupported.add(root)
            return True
        return False


def build_body(
    settings: RequestSettings,
    images: Sequence[PreparedImage],
    *,
    rid: str,
    remaining_ms: float,
    multimodal: bool,
    support: FieldSupport,
    image_token: str | None = None,
    state: Sequence[float] | None = None,
    guidance: RtcGuidance | None = None,
    rtc_horizon: int = 0,
) -> dict[str, Any]:
    """One streaming request. Without server image support (`multimodal=False`): text only.
    `state`: the robot's state for a policy that reads one; `guidance`: real-time chunking's
    tail and delay (`execution_horizon` = `rtc_horizon`).

    The instruction comes first and the images last (one `image_token` placeholder each), so
    consecutive frames share the instruction's KV in the server's prefix cache.
    """
    sampling: dict[str, Any] = {"temperature": settings.temperature}
    text = settings.instruction
    if multimodal and image_token:
        text = f"{text}\n" + image_token * len(images)
    body: dict[str, Any] = {"text": text, "stream": True, "rid": rid}
    if multimodal:
        body["image_data"] = [image.image_data for image in images]
        hashes = [image.mm_hash for image in images]
        if hashes and all(h is not None for h in hashes):
            body["mm_hashes"] = hashes
        if settings.unnorm_key:
            body["unnorm_key"] = settings.unnorm_key
        body["num_actions"] = settings.num_actions
        if settings.max_new_tokens:
            sampling["max_new_tokens"] = settings.max_new_tokens
        if state is not None:
            body["state"] = [float(v) for v in state]
        if guidance is not None:
            body["prev_chunk"] = guidance.prev_chunk.tolist()
            body["inference_delay"] = guidance.inference_delay
            body["execution_horizon"] = rtc_horizon
    else:
        sampling["max_new_tokens"] = settings.max_new_tokens or TEXT_ONLY_MAX_NEW_TOKENS
    body["sampling_params"] = sampling
    optional: dict[str, Any] = {"deadline_ms": round(max(remaining_ms, 0.0), 3)}
    if settings.control_period_ms and multimodal:
        optional["control_period_ms"] = round(settings.control_period_ms, 3)
    if settings.priority:
        optional["priority"] = settings.priority
    if settings.session:
        # An identity, not a prompt rebuild: each frame is a fresh prompt, and a newer frame
        # supersedes this session's older waiting one on the server too.
        optional["session_id"] = settings.session
        optional["supersede"] = True
    body.update({k: v for k, v in optional.items() if k not in support.unsupported})
    return body
