"""The node's own plain stand-ins for the LeRobot classes its clients pickle.

LeRobot's async client pickles `TimedObservation` and `RemotePolicyConfig` (module
`lerobot.async_inference.helpers`, `lerobot.scripts.server.helpers` before 0.4) holding
`PolicyFeature` / `FeatureType` (`lerobot.configs.types`). The restricted unpickler
(`unpickler.py`) maps those names onto these classes, so the node never imports lerobot. Each
class takes its pickled state through `__setstate__`, which keeps only the fields LeRobot
defines: a pickle cannot set anything else on them.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class FeatureType(StrEnum):
    """LeRobot's `FeatureType`; pickled as `FeatureType(value)`."""

    STATE = "STATE"
    VISUAL = "VISUAL"
    ENV = "ENV"
    ACTION = "ACTION"
    REWARD = "REWARD"
    LANGUAGE = "LANGUAGE"


class _Plain:
    """A LeRobot dataclass as plain attributes; `FIELDS` name them, with their defaults."""

    FIELDS: dict[str, Any] = {}

    def __init__(self, **values: Any):
        self.__setstate__(values)

    def __setstate__(self, state: Any) -> None:
        if not isinstance(state, dict):
            raise TypeError(f"{type(self).__name__} state must be a dict")
        for name, default in self.FIELDS.items():
            setattr(self, name, state.get(name, default))

    def __repr__(self) -> str:
        args = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.FIELDS)
        return f"{type(self).__name__}({args})"


class PolicyFeature(_Plain):
    FIELDS = {"type": None, "shape": ()}


class TimedObservation(_Plain):
    FIELDS = {"timestamp": None, "timestep": None, "observation": None, "must_go": False}


class TimedAction(_Plain):
    FIELDS = {"timestamp": None, "timestep": None, "action": None}


class RemotePolicyConfig(_Plain):
    FIELDS = {
        "policy_type": None,
        "pretrained_name_or_path": None,
        "lerobot_features": None,
        "actions_per_chunk": None,
        "device": "cpu",
        "rename_map": None,
    }
