"""The simulated cameras: frames rendered, JPEG-encoded and published on a thread of their own.

A frame is captured (a snapshot of the joint positions, stamped with the state's time) on the
stepping thread and rendered here, so the ~50 ms of software rendering never holds up a control
step: the message arrives after its stamp, as a real camera's does. A capture while the previous
frame is still being rendered is dropped, as a camera that cannot keep up drops frames.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ros_bridge.compat import builtin_interfaces, sensor_msgs
from ros_bridge.sim.aloha_env import AlohaEnv
from ros_bridge.sim.sim_log import NS_PER_S, FrameRecord, SimLog
from ros_bridge.tools.image_codec import CODEC_FORMATS, encode_rgb

Publish = Callable[[str, Any], None]  # (camera, CompressedImage message)


class SimCamera:
    def __init__(self, env: AlohaEnv, publish: Publish, log: SimLog, jpeg_quality: int) -> None:
        self._env = env
        self._publish = publish
        self._log = log
        self._quality = jpeg_quality
        self._queue: queue.Queue[tuple[int, np.ndarray] | None] = queue.Queue(maxsize=1)
        self._thread = threading.Thread(target=self._loop, name="sim-camera", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def capture(self, stamp_ns: int, snapshot: np.ndarray) -> None:
        try:
            self._queue.put_nowait((stamp_ns, snapshot))
        except queue.Full:
            self._log.frames_dropped += 1  # counted on the stepping thread only

    def stop(self, timeout_s: float = 10.0) -> None:
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join(timeout_s)

    def _loop(self) -> None:
        try:
            while (item := self._queue.get()) is not None:
                stamp_ns, snapshot = item
                images = self._env.render(snapshot)
                for camera, pixels in images.items():
                    self._publish(camera, self._message(camera, stamp_ns, pixels))
                self._log.add_frame(FrameRecord(stamp_ns, time.time_ns()))
        finally:
            self._env.free_renderer()

    def _message(self, camera: str, stamp_ns: int, pixels: np.ndarray) -> Any:
        msg = sensor_msgs.msg.CompressedImage(
            format=CODEC_FORMATS["jpeg"], data=encode_rgb(pixels, "jpeg", self._quality)
        )
        sec, nanosec = divmod(stamp_ns, NS_PER_S)
        msg.header.stamp = builtin_interfaces.msg.Time(sec=sec, nanosec=nanosec)
        msg.header.frame_id = f"{camera}_camera_optical_frame"
        return msg
