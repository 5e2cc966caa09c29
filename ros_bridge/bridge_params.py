"""The bridge's parameters and launch arguments, defined once (ROS-free).

`VlaBridgeNode` declares `PARAMS`; `launch/vla_bridge.launch.py` turns every launch-exposed
parameter plus `SERVER_ARGS` into `DeclareLaunchArgument`s; `vla-bridge` (cli.py) turns the very
same table into command-line flags. One table keeps the three in step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from ros_bridge.chunk_executor import ExecutorMode
from ros_bridge.late_policy import OnLate
from ros_bridge.output_modes import OUTPUT_MODES


@dataclass(frozen=True)
class ParamSpec:
    name: str
    default: Any  # [] declares an (empty) string array
    description: str
    dynamic: bool = False  # may change at runtime (set-parameters); else read-only
    choices: tuple[str, ...] = ()
    launch: bool = True  # exposed as a launch argument and a vla-bridge flag

    @property
    def kind(self) -> type:
        return list if isinstance(self.default, list) else type(self.default)


PARAMS: tuple[ParamSpec, ...] = (
    ParamSpec("server_url", "http://127.0.0.1:30000", "vla-server base URL", launch=False),
    ParamSpec("api_key", "", "bearer token for the server ('' = none)"),
    ParamSpec("image_topics", ["image"], "camera topics; the first one triggers requests"),
    ParamSpec("compressed", False, "subscribe to sensor_msgs/CompressedImage, not Image"),
    ParamSpec("instruction", "pick up the cube", "task instruction sent with every frame", True),
    ParamSpec("unnorm_key", "", "action normalisation key of the checkpoint ('' = default)", True),
    ParamSpec("num_actions", 1, "action vectors to generate per frame", True),
    ParamSpec("priority", 0, "request priority (server scheduling)", True),
    ParamSpec("session", "", "session id; open a new one per episode ('' = none)", True),
    ParamSpec(
        "control_rate_hz",
        10.0,
        "controller rate: the executor's command rate; also the actions' spacing by default",
        True,
    ),
    ParamSpec("deadline_ms", 500.0, "frame arrival to first action budget; late: on_late", True),
    ParamSpec("ttft_budget_ms", 250.0, "P99 time-to-first-token budget (WARN above)", True),
    ParamSpec("itl_p99_budget_ms", 100.0, "P99 inter-token latency budget (WARN above)", True),
    ParamSpec(
        "on_late",
        OnLate.HOLD.value,
        "on a missed deadline or a failed server: hold (repeat last action), zero, or stop",
        True,
        choices=tuple(p.value for p in OnLate),
    ),
    ParamSpec(
        "output",
        OUTPUT_MODES[0],
        "float64_multiarray (forward_command_controller) or joint_trajectory",
        choices=OUTPUT_MODES,
    ),
    ParamSpec("joint_names", [], "joint names, in action order (checks the action width)"),
    ParamSpec(
        "executor",
        ExecutorMode.NONE.value,
        "action chunks to one command per control period: none (publish each action as it "
        "streams), hold, interpolate, ensemble (ACT temporal ensembling) or rtc (real-time "
        "chunking: the server continues the plan's unexecuted tail; flow policies)",
        choices=tuple(m.value for m in ExecutorMode),
    ),
    ParamSpec(
        "rtc_execution_horizon",
        10,
        "rtc: where the server's guidance toward the tail ends (LeRobot's execution_horizon)",
    ),
    ParamSpec("action_rate_hz", 0.0, "rate of a chunk's actions, their spacing (0 = control)"),
    ParamSpec("ensemble_coeff", 0.01, "ensemble weight exp(-coeff * age in action periods)"),
    ParamSpec(
        "joint_states_topic",
        "",
        "executor clock: '' = a timer at control_rate_hz; a JointState topic = one command per "
        "state message, for its stamp + one control period (lockstep with a robot or a sim)",
    ),
    ParamSpec("action_topic", "commands", "topic the commands are published on"),
    ParamSpec("max_new_tokens", 0, "token cap per request (0 = the server's choice)", True),
    ParamSpec("diagnostics_period_s", 1.0, "seconds between /diagnostics messages"),
    ParamSpec("latency_window", 1000, "samples in each rolling latency window"),
)
PARAMS_BY_NAME = {p.name: p for p in PARAMS}
LAUNCH_PARAMS = tuple(p for p in PARAMS if p.launch)

# Inclusive bounds a runtime change must respect, declared as the parameter's integer or
# floating-point range, so `ros2 param set` outside them fails with the bounds as the reason.
PARAM_RANGES: dict[str, tuple[float, float]] = {
    "num_actions": (1, 1024),
    "control_rate_hz": (0.1, 10_000.0),
    "deadline_ms": (1.0, 3_600_000.0),
    "ttft_budget_ms": (1.0, 3_600_000.0),
    "itl_p99_budget_ms": (1.0, 3_600_000.0),
    "max_new_tokens": (0, 1_000_000),
}


@dataclass(frozen=True)
class LaunchArg:
    name: str
    default: str
    description: str


# Launch arguments that start the server and wire topics rather than set a node parameter.
SERVER_ARGS: tuple[LaunchArg, ...] = (
    LaunchArg("model", "", "checkpoint folder for vla-server ('' = the embedded demo model)"),
    LaunchArg("host", "127.0.0.1", "vla-server bind address"),
    LaunchArg("port", "30000", "vla-server HTTP port"),
    LaunchArg("start_server", "true", "start vla-server here (false: use one already running)"),
    LaunchArg("camera", "/camera/image_raw", "topic the node's `image` input is remapped to"),
)


def launch_default(spec: ParamSpec) -> str:
    """The parameter default as launch-argument text (YAML, as launch_ros parses it)."""
    if isinstance(spec.default, bool):
        return "true" if spec.default else "false"
    if isinstance(spec.default, list):
        return "[" + ", ".join(spec.default) + "]"
    return str(spec.default)


def parse_launch_value(spec: ParamSpec, text: str) -> Any:
    """Launch-argument text back to the parameter's type (`launch_default`'s inverse)."""
    if spec.kind is str:
        return text  # YAML would turn '123' or 'true' into a number or a bool
    value = yaml.safe_load(text) if text.strip() else None
    if spec.kind is list:
        if value is None:
            return []
        if not isinstance(value, list):
            value = [value]
        return [str(v) for v in value]
    if spec.kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, spec.kind) or (spec.kind is int and isinstance(value, bool)):
        raise ValueError(f"{spec.name}: expected {spec.kind.__name__}, got {text!r}")
    return value
