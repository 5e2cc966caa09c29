"""Run inside LeRobot 0.6.1's own venv (never imported by vla_server): LeRobot's own
`RobotClient` on a hardware-free robot, against a node's LeRobot door, recording every gRPC
message and every chunk it receives.

    python lerobot_client_script.py OUT.json --server_address=127.0.0.1:PORT \\
        --policy_type=TYPE --pretrained_name_or_path=NAME --task=TASK --seconds=30 \\
        --state_dim=6 --action_dim=6 --actions_per_chunk=50 --fps=30 \\
        [--joints=shoulder_pan,...] [--cameras=front,wrist]

The robot (`MockRobot`): `state_dim` joints (`--joints`, default `j0`, `j1`, ...; observed and
commanded as `<joint>.pos`, as LeRobot's arms name them; the first `action_dim` follow the
actions it is sent, the others drift), and cameras (`--cameras`, default `front,wrist`; the
stock client sends no `rename_map`, so they are named as the policy's) rendering a smooth
pattern that moves with the frame count. The client is LeRobot's, unchanged; the script only
wraps its gRPC stub to record the messages, and its `_aggregate_action_queues` to count the
actions merged with ones already queued. OUT.json: `calls` (method, start time, the request
messages and the reply, base64, or the error), `chunks` (each chunk as the client loaded it),
`aggregated` (actions merged), `executed` (actions sent to the robot), versions.
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import threading
import time
from dataclasses import dataclass, field
from importlib.metadata import version
from typing import Any

import grpc
import numpy as np
from lerobot.async_inference import robot_client
from lerobot.async_inference.configs import RobotClientConfig
from lerobot.robots.config import RobotConfig
from lerobot.robots.robot import Robot

CAMERAS = ("front", "wrist")


@RobotConfig.register_subclass("vla_mock")
@dataclass
class MockRobotConfig(RobotConfig):
    state_dim: int = 4
    action_dim: int = 3
    height: int = 24
    width: int = 32
    camera_names: tuple[str, ...] = field(default=CAMERAS)
    joint_names: tuple[str, ...] = ()  # default: j0, j1, ...

    @property
    def joints(self) -> tuple[str, ...]:
        return self.joint_names or tuple(f"j{i}" for i in range(self.state_dim))


class MockRobot(Robot):
    config_class = MockRobotConfig
    name = "vla_mock"

    def __init__(self, config: MockRobotConfig):
        super().__init__(config)
        self.config = config
        self.positions = [0.1 * i for i in range(config.state_dim)]
        self.frame = 0
        self.executed = 0

    @property
    def observation_features(self) -> dict:
        shape = (self.config.height, self.config.width, 3)
        joints = {f"{j}.pos": float for j in self.config.joints}
        return {**joints, **dict.fromkeys(self.config.camera_names, shape)}

    @property
    def action_features(self) -> dict:
        return {f"{j}.pos": float for j in self.config.joints[: self.config.action_dim]}

    is_connected = property(lambda self: True)
    is_calibrated = property(lambda self: True)

    def connect(self, calibrate: bool = True) -> None: ...
    def calibrate(self) -> None: ...
    def configure(self) -> None: ...
    def disconnect(self) -> None: ...

    def get_observation(self) -> dict[str, Any]:
        self.frame += 1
        for i in range(self.config.action_dim, self.config.state_dim):
            self.positions[i] = math.sin(0.05 * self.frame + i)
        pairs = zip(self.config.joints, self.positions, strict=True)
        obs: dict[str, Any] = {f"{j}.pos": float(v) for j, v in pairs}
        h, w = self.config.height, self.config.width
        y, x = np.mgrid[0:h, 0:w]
        for k, cam in enumerate(self.config.camera_names):
            channels = [(x * (4 + c) + y * (3 + k) + 5 * self.frame) % 256 for c in range(3)]
            obs[cam] = np.stack(channels, axis=-1).astype(np.uint8)
        return obs

    def send_action(self, action: dict[str, Any]) -> dict[str, Any]:
        for i, joint in enumerate(self.config.joints[: self.config.action_dim]):
            self.positions[i] = float(action[f"{joint}.pos"])
        self.executed += 1
        return action


def _b64(message: Any) -> str:
    return base64.b64encode(message.SerializeToString()).decode()


class RecordingStub:
    """LeRobot's stub with every call recorded in order of its start."""

    def __init__(self, stub: Any, t0: float):
        self.stub, self.t0, self.calls, self.lock = stub, t0, [], threading.Lock()

    def _call(self, method: str, requests: list[Any], invoke: Any) -> Any:
        entry = {"method": method, "start": time.time() - self.t0,
                 "requests": [_b64(m) for m in requests]}  # fmt: skip
        with self.lock:
            self.calls.append(entry)
        try:
            reply = invoke()
        except grpc.RpcError as e:
            entry.update(code=e.code().name, details=e.details())
            raise
        entry.update(code="OK", reply=_b64(reply), end=time.time() - self.t0)
        return reply

    def Ready(self, request: Any) -> Any:  # noqa: N802
        return self._call("Ready", [request], lambda: self.stub.Ready(request))

    def SendPolicyInstructions(self, request: Any) -> Any:  # noqa: N802
        invoke = lambda: self.stub.SendPolicyInstructions(request)  # noqa: E731
        return self._call("SendPolicyInstructions", [request], invoke)

    def SendObservations(self, iterator: Any) -> Any:  # noqa: N802
        messages = list(iterator)
        invoke = lambda: self.stub.SendObservations(iter(messages))  # noqa: E731
        return self._call("SendObservations", messages, invoke)

    def GetActions(self, request: Any) -> Any:  # noqa: N802
        return self._call("GetActions", [request], lambda: self.stub.GetActions(request))


def _record_chunks(client: Any, chunks: list[dict], aggregated: list[int]) -> None:
    original = client._aggregate_action_queues

    def aggregate(incoming: list[Any], aggregate_fn: Any = None) -> None:
        with client.action_queue_lock:
            queued = {a.get_timestep() for a in client.action_queue.queue}
        with client.latest_action_lock:
            latest = client.latest_action
        chunks.append([{"timestep": a.get_timestep(), "timestamp": a.get_timestamp(),
                        "action": a.get_action().tolist(), "type": type(a).__module__
                        + "." + type(a).__name__} for a in incoming])  # fmt: skip
        aggregated.append(sum(a.get_timestep() in queued and a.get_timestep() > latest
                              for a in incoming))  # fmt: skip
        original(incoming, aggregate_fn)

    client._aggregate_action_queues = aggregate


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    for name, kind in (("server_address", str), ("policy_type", str), ("task", str),
                       ("pretrained_name_or_path", str), ("seconds", float), ("state_dim", int),
                       ("action_dim", int), ("actions_per_chunk", int), ("fps", int),
                       ("aggregate_fn_name", str), ("cameras", str), ("joints", str)):  # fmt: skip
        optional = ("aggregate_fn_name", "cameras", "joints")
        p.add_argument(f"--{name}", type=kind, required=name not in optional)
    args = p.parse_args()
    cameras = tuple(args.cameras.split(",")) if args.cameras else CAMERAS
    joints = tuple(args.joints.split(",")) if args.joints else ()
    if joints and len(joints) != args.state_dim:
        raise SystemExit(f"--joints names {len(joints)} joints, --state_dim is {args.state_dim}")
    robot_cfg = MockRobotConfig(
        state_dim=args.state_dim,
        action_dim=args.action_dim,
        camera_names=cameras,
        joint_names=joints,
    )
    cfg = RobotClientConfig(
        policy_type=args.policy_type,
        pretrained_name_or_path=args.pretrained_name_or_path,
        robot=robot_cfg,
        actions_per_chunk=args.actions_per_chunk,
        task=args.task,
        server_address=args.server_address,
        fps=args.fps,
        aggregate_fn_name=args.aggregate_fn_name or "weighted_average",
    )
    robot_client.make_robot_from_config = MockRobot  # the one substitution: no hardware
    client = robot_client.RobotClient(cfg)
    stub = client.stub = RecordingStub(client.stub, time.time())
    chunks: list[dict] = []
    aggregated: list[int] = []
    _record_chunks(client, chunks, aggregated)
    if not client.start():
        raise SystemExit("RobotClient.start() failed (see the log above)")
    receiver = threading.Thread(target=client.receive_actions, daemon=True)
    receiver.start()
    loop = threading.Thread(target=client.control_loop, args=(args.task,), daemon=True)
    loop.start()
    time.sleep(args.seconds)
    client.shutdown_event.set()
    loop.join(10)
    receiver.join(10)  # its GetActions returns within the server's queue timeout
    report = {
        "versions": {"lerobot": version("lerobot"), "grpcio": version("grpcio")},
        "config": {k: getattr(args, k) for k in vars(args) if k != "out"},
        "calls": stub.calls,
        "chunks": chunks,
        "aggregated": aggregated,
        "executed": client.robot.executed,
    }
    with open(args.out, "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main()
