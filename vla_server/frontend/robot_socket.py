"""vLLM-Omni's robot socket: `WS /v1/realtime/robot/openpi`, for clients written against
vLLM-Omni's openpi endpoint (`openpi_client.WebsocketClientPolicy` + `np.asarray(policy.infer(
obs))`), served from the same action query as every other door.

Protocol, as vLLM-Omni's `entrypoints/openpi/connection.py` speaks it:

1. on accept the server sends its `policy_server_config`, msgpack: image resolution, cameras
   (external and wrist), action space, horizon and width, built from the served checkpoint;
2. each binary frame is a msgpack-numpy map (openpi's markers): `endpoint` ("infer", the
   default, or "reset"), an optional `session_id`, `seed` and `sampling_params`, and the
   observation (`prompt`, the cameras, `state`, real-time chunking's `prev_chunk`,
   `inference_delay`, `execution_horizon`, `rtc`: what the openpi door reads). Text and empty
   frames are skipped;
3. an infer reply is the bare float32 array [horizon, action_dim] (not `{"actions": ...}`); a
   reset replies `{"status": "reset successful"}`;
4. an error is a binary `{"type": "error", "message": ...}` (the field named) and the socket
   stays open; a frame over `--robot-openpi-max-payload-bytes` is such an error too. A socket
   idle for `--robot-openpi-idle-timeout` seconds is closed (0: never).

The node's noise rule here (vLLM-Omni's clients seldom send a seed): a request without `seed`
is denoised from the noise of `blake2b(session_id, k)`, k counting the session's inferences
from 0; a reset, or a new `session_id`, starts the count again, so a robot that resets and
replays its observations gets the same chunks. `sampling_params.num_inference_steps` other
than the checkpoint's own is refused (the node's denoising schedule is the checkpoint's).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
from fastapi import FastAPI, WebSocket, WebSocketDisconnect
from PIL import Image

from vla_server.errors import RequestError
from vla_server.frontend.action_request import ActionFailed, ActionsBody
from vla_server.frontend.node_handle import NodeHandle
from vla_server.frontend.openpi_observation import OpenpiConfig, observation_body
from vla_server.frontend.openpi_policy import infer
from vla_server.frontend.openpi_wire import WireFormatError, pack, unpack
from vla_server.frontend.tokenizer_manager import TokenizerManager

logger = logging.getLogger(__name__)

PATH = "/v1/realtime/robot/openpi"
_CONTROL_KEYS = ("endpoint", "session_id", "seed", "sampling_params")
_CAMERA_PREFIX = "observation.images."
INTERNAL_ERROR = "Internal inference error"


def policy_server_config(tm: TokenizerManager, cfg: OpenpiConfig) -> dict[str, Any]:
    """vLLM-Omni's `policy_server_config` (DROID/roboarena's fields) for the served policy."""
    policy = tm.policy
    cameras = list(policy.robot_io.cameras) if policy.robot_io else []
    wrist = [c for c in cameras if "wrist" in c]
    return {
        "image_resolution": model_image_size(tm),
        "n_external_cameras": len(cameras) - len(wrist),
        "needs_wrist_camera": bool(wrist),
        "needs_stereo_camera": False,
        "needs_session_id": False,
        "action_space": "joint_position",
        "action_horizon": cfg.action_horizon or policy.default_num_actions,
        "action_dim": policy.action_dim,
        "max_cameras": len(cameras),
        "cameras": cameras,
        "state_dim": policy.robot_io.state_dim if policy.robot_io else 0,
    }


def model_image_size(tm: TokenizerManager) -> list[int] | None:
    """[height, width] of the images the model sees (what the preprocessor makes of a frame)."""
    if tm.mm.pipeline is None:
        return None
    preprocess = tm.mm.pipeline.preprocess
    frame = np.zeros((32, 32, 3), dtype=np.uint8)
    pixels = preprocess.apply(frame if preprocess.reads_arrays else Image.fromarray(frame))
    return [int(n) for n in pixels.shape[-2:]]


@dataclass(frozen=True)
class RobotState:
    """What the socket keeps of its robot: the session and how many chunks it has been sent.
    A request works on the state it would leave; the socket keeps that only if it succeeds."""

    session_id: str = ""
    inferences: int = 0

    def seed(self) -> int:
        """The noise seed of the session's next inference."""
        digest = hashlib.blake2b(digest_size=8, person=b"vla-robot-seed")
        digest.update(f"{self.session_id}\0{self.inferences}".encode())
        return int.from_bytes(digest.digest(), "little") & 0x7FFF_FFFF


def _error(message: str) -> bytes:
    return pack({"type": "error", "message": message})


def _control(frame: dict[Any, Any], steps: int | None) -> tuple[str, str | None, int | None]:
    """The frame's endpoint, session id and seed, checked (RequestError naming the key)."""
    endpoint = frame.get("endpoint", "infer")
    if endpoint not in ("infer", "reset"):
        raise RequestError("must be 'infer' or 'reset'", "endpoint")
    session = frame.get("session_id")
    if session is not None and not isinstance(session, str):
        raise RequestError("must be a string", "session_id")
    seed = frame.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int | np.integer)):
        raise RequestError("must be an integer", "seed")
    params = frame.get("sampling_params") or {}
    if not isinstance(params, dict):
        raise RequestError("must be a map", "sampling_params")
    unknown = sorted(set(params) - {"num_inference_steps"})
    if unknown:
        raise RequestError(f"{unknown[0]!r} is not supported", "sampling_params")
    asked = params.get("num_inference_steps")
    if asked is not None and asked != steps:
        raise RequestError(
            f"this checkpoint denoises in {steps} steps; {asked} is not supported",
            "sampling_params.num_inference_steps",
        )
    return endpoint, session, None if seed is None else int(seed)


class RobotSocket:
    """One connection's loop: frames in, bare arrays (or statuses, or errors) out."""

    def __init__(self, ws: WebSocket, node: NodeHandle, cfg: OpenpiConfig):
        self.ws, self.tm, self.cfg = ws, node.tokenizer_manager, cfg
        self.max_bytes = node.config.robot_openpi_max_payload_bytes
        self.idle_s = node.config.robot_openpi_idle_timeout or None
        self.steps = (self.tm.policy.describe() or {}).get("num_inference_steps")
        self.robot = RobotState()

    async def run(self) -> None:
        await self.ws.send_bytes(msgspec.msgpack.encode(policy_server_config(self.tm, self.cfg)))
        while True:
            try:
                msg = await asyncio.wait_for(self.ws.receive(), self.idle_s)
            except TimeoutError:
                await self.ws.close(code=1000, reason="idle timeout")
                return
            if msg["type"] == "websocket.disconnect":
                return
            frame = msg.get("bytes")
            if frame:  # text and empty frames are skipped, as vLLM-Omni does
                await self.ws.send_bytes(await self.answer(frame))

    async def answer(self, frame: bytes) -> bytes:
        """The reply to one frame; counted in `vla_http_requests_total` under this route, with
        the HTTP status the same failure gets on `/v1/actions`."""
        status = 200
        try:
            if len(frame) > self.max_bytes:
                raise RequestError(
                    f"{len(frame)} bytes exceed the {self.max_bytes}-byte payload limit", "payload"
                )
            return await self._handle(frame)
        except RequestError as e:
            status = e.status_code
            return _error(f"{e.field}: {e.message}" if e.field else e.message)
        except ActionFailed as e:
            status = 500
            logger.warning("robot socket: action decoding failed: %s", e)
            return _error(INTERNAL_ERROR)
        finally:
            self.tm.metrics.http_requests.labels(PATH, str(status)).inc()

    async def _handle(self, frame: bytes) -> bytes:
        try:
            obs = unpack(frame)
        except WireFormatError as e:
            raise RequestError(str(e), "payload") from None
        if not isinstance(obs, dict):
            raise RequestError("the request must be a msgpack map", "payload")
        endpoint, session, seed = _control(obs, self.steps)
        robot = self.robot
        if endpoint == "reset" or (session is not None and session != robot.session_id):
            robot = RobotState(robot.session_id if session is None else session)
        if endpoint == "reset":
            self.robot = robot
            return pack({"status": "reset successful"})
        observation = {k: v for k, v in obs.items() if k not in _CONTROL_KEYS}
        self._check_cameras(observation)
        body: ActionsBody = observation_body(observation, self.cfg, self.tm.policy.robot_io)
        body.seed = robot.seed() if seed is None else seed
        out = await infer(self.tm, body)
        self.robot = RobotState(robot.session_id, robot.inferences + 1)
        return pack(np.asarray(out["actions"], dtype=np.float32))

    def _check_cameras(self, observation: dict[Any, Any]) -> None:
        """vLLM-Omni masks a camera it does not know; here it is an error naming the key."""
        robot = self.tm.policy.robot_io
        if robot is None or not robot.cameras:
            return
        images = observation.get("images")
        named = [f"images/{k}" for k in images] if isinstance(images, dict) else []
        named += [k for k in observation if isinstance(k, str) and k.startswith(_CAMERA_PREFIX)]
        for key in named:
            camera = key.removeprefix("images/").removeprefix(_CAMERA_PREFIX)
            if camera not in robot.cameras:
                raise RequestError(f"is not a camera of this policy ({list(robot.cameras)})", key)


def add_robot_socket_route(app: FastAPI, node: NodeHandle) -> None:
    cfg = OpenpiConfig.from_config(node.config)

    @app.websocket(PATH)
    async def robot_socket(ws: WebSocket) -> None:
        await ws.accept()
        try:
            await RobotSocket(ws, node, cfg).run()
        except (WebSocketDisconnect, OSError):
            return
        except Exception:
            logger.exception("robot socket failed")
            with contextlib.suppress(WebSocketDisconnect, OSError, RuntimeError):
                await ws.send_bytes(_error(INTERNAL_ERROR))
                await ws.close(code=1011)
