"""rclpy.qos: QoS profiles, policy enums and the rmw preset profiles."""

from __future__ import annotations

from enum import Enum, IntEnum
from typing import Any

from ros_bridge.shim.rclpy.duration import Duration


class InvalidQoSProfileException(Exception):
    def __init__(self, *args: Any) -> None:
        super().__init__("Invalid QoSProfile", *args)


class HistoryPolicy(IntEnum):
    SYSTEM_DEFAULT = 0
    KEEP_LAST = 1
    KEEP_ALL = 2
    UNKNOWN = 3


class ReliabilityPolicy(IntEnum):
    SYSTEM_DEFAULT = 0
    RELIABLE = 1
    BEST_EFFORT = 2
    UNKNOWN = 3
    BEST_AVAILABLE = 4


class DurabilityPolicy(IntEnum):
    SYSTEM_DEFAULT = 0
    TRANSIENT_LOCAL = 1
    VOLATILE = 2
    UNKNOWN = 3
    BEST_AVAILABLE = 4


class LivelinessPolicy(IntEnum):
    SYSTEM_DEFAULT = 0
    AUTOMATIC = 1
    MANUAL_BY_TOPIC = 3
    UNKNOWN = 4
    BEST_AVAILABLE = 5


# rclpy's older names, still common in robot code.
QoSHistoryPolicy = HistoryPolicy
QoSReliabilityPolicy = ReliabilityPolicy
QoSDurabilityPolicy = DurabilityPolicy
QoSLivelinessPolicy = LivelinessPolicy

_POLICY_TYPES = {
    "history": HistoryPolicy,
    "reliability": ReliabilityPolicy,
    "durability": DurabilityPolicy,
    "liveliness": LivelinessPolicy,
}
_DURATIONS = ("lifespan", "deadline", "liveliness_lease_duration")


class QoSProfile:
    """History/depth, reliability, durability, ... Unset fields take rmw's default profile
    (keep-last 10, reliable, volatile); either `history` or `depth` must be given."""

    __slots__ = (
        "_history",
        "_depth",
        "_reliability",
        "_durability",
        "_lifespan",
        "_deadline",
        "_liveliness",
        "_liveliness_lease_duration",
        "_avoid_ros_namespace_conventions",
    )

    def __init__(self, **kwargs: Any) -> None:
        unknown = [key for key in kwargs if "_" + key not in self.__slots__]
        if unknown:
            raise AssertionError(f"Invalid arguments passed to constructor: {unknown}")
        if "history" not in kwargs:
            if "depth" not in kwargs:
                raise InvalidQoSProfileException("History and/or depth settings are required.")
            kwargs["history"] = HistoryPolicy.KEEP_LAST
        if kwargs["history"] == HistoryPolicy.KEEP_LAST and "depth" not in kwargs:
            raise InvalidQoSProfileException("History set to KEEP_LAST without a depth setting.")
        defaults: dict[str, Any] = {
            "depth": 10,
            "reliability": ReliabilityPolicy.RELIABLE,
            "durability": DurabilityPolicy.VOLATILE,
            "lifespan": Duration(),
            "deadline": Duration(),
            "liveliness": LivelinessPolicy.SYSTEM_DEFAULT,
            "liveliness_lease_duration": Duration(),
            "avoid_ros_namespace_conventions": False,
        }
        for name in (slot[1:] for slot in self.__slots__):
            setattr(self, name, kwargs.get(name, defaults.get(name)))

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_"):
            object.__setattr__(self, name, value)
            return
        if name in _POLICY_TYPES:
            value = _POLICY_TYPES[name](value)
        elif name in _DURATIONS:
            if not isinstance(value, Duration):
                raise AssertionError(f"{name} must be a Duration")
        elif name == "depth":
            if not isinstance(value, int) or value < 0:
                raise AssertionError("depth must be a non-negative int")
        elif name == "avoid_ros_namespace_conventions":
            if not isinstance(value, bool):
                raise AssertionError(f"{name} must be a bool")
        else:
            raise AttributeError(f"QoSProfile has no policy '{name}'")
        object.__setattr__(self, "_" + name, value)

    def __getattr__(self, name: str) -> Any:
        if "_" + name in self.__slots__:
            return object.__getattribute__(self, "_" + name)
        raise AttributeError(name)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, QoSProfile):
            return False
        return all(getattr(self, slot) == getattr(other, slot) for slot in self.__slots__)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        body = ", ".join(f"{slot[1:]}={getattr(self, slot)!r}" for slot in self.__slots__)
        return f"QoSProfile({body})"


def _preset(
    history: HistoryPolicy, depth: int, reliability: ReliabilityPolicy, durability: DurabilityPolicy
) -> QoSProfile:
    return QoSProfile(history=history, depth=depth, reliability=reliability, durability=durability)


_KL, _REL, _VOL = HistoryPolicy.KEEP_LAST, ReliabilityPolicy.RELIABLE, DurabilityPolicy.VOLATILE
qos_profile_default = _preset(_KL, 10, _REL, _VOL)
qos_profile_system_default = _preset(
    HistoryPolicy.SYSTEM_DEFAULT,
    0,
    ReliabilityPolicy.SYSTEM_DEFAULT,
    DurabilityPolicy.SYSTEM_DEFAULT,
)
qos_profile_sensor_data = _preset(_KL, 5, ReliabilityPolicy.BEST_EFFORT, _VOL)
qos_profile_services_default = _preset(_KL, 10, _REL, _VOL)
qos_profile_parameters = _preset(_KL, 1000, _REL, _VOL)
qos_profile_parameter_events = _preset(_KL, 1000, _REL, _VOL)
# rcl's /rosout profile: late joiners get the last 1000 lines, none older than 10 s.
qos_profile_rosout_default = QoSProfile(
    history=_KL,
    depth=1000,
    reliability=_REL,
    durability=DurabilityPolicy.TRANSIENT_LOCAL,
    lifespan=Duration(seconds=10),
)


class QoSPresetProfiles(Enum):
    DEFAULT = qos_profile_default
    SYSTEM_DEFAULT = qos_profile_system_default
    SENSOR_DATA = qos_profile_sensor_data
    SERVICES_DEFAULT = qos_profile_services_default
    PARAMETERS = qos_profile_parameters
    PARAMETER_EVENTS = qos_profile_parameter_events
    ROSOUT_DEFAULT = qos_profile_rosout_default


def profile_from(qos_or_depth: QoSProfile | int) -> QoSProfile:
    """What rclpy makes of a publisher/subscription's `qos_profile` argument."""
    if isinstance(qos_or_depth, QoSProfile):
        return qos_or_depth
    if isinstance(qos_or_depth, int) and not isinstance(qos_or_depth, bool):
        if qos_or_depth < 0:
            raise ValueError("history depth must be greater than or equal to zero")
        return QoSProfile(depth=qos_or_depth)
    raise TypeError(f"Expected QoSProfile or int, but received {type(qos_or_depth)!r}")
