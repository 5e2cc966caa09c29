"""SmolVLA (LeRobot `smolvla`) for vla-server: `SmolVLA.from_folder` and its serving steps
(`prefix_kv`, `expert_context`, `velocity`), the processors, and a tiny random checkpoint
builder (`tiny.py`)."""

from vla_server.policies.smolvla.config import SmolVLAConfig, read_config
from vla_server.policies.smolvla.expert import ExpertContext
from vla_server.policies.smolvla.model import SmolVLA
from vla_server.policies.smolvla.policy import SmolVLAPolicy
from vla_server.policies.smolvla.prefix import PrefixInputs
from vla_server.policies.smolvla.prefix_kv import PrefixKV
from vla_server.policies.smolvla.processor import Observation, SmolVLAProcessor
from vla_server.policies.smolvla.weights import CheckpointMismatchError

__all__ = [
    "CheckpointMismatchError",
    "ExpertContext",
    "Observation",
    "PrefixInputs",
    "PrefixKV",
    "SmolVLA",
    "SmolVLAConfig",
    "SmolVLAPolicy",
    "SmolVLAProcessor",
    "read_config",
]
