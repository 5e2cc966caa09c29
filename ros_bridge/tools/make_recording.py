"""Generates a deterministic recorded camera stream as a rosbag2 bag.

    python -m ros_bridge.tools.make_recording OUT_BAG [--frames N] [--rate HZ] [--size WxH]
        [--storage mcap|sqlite3] [--format jpeg|png|rgb8] [--jpeg-quality Q]
        [--source aloha|procedural] [--cameras top[,angle]] [--seed S]

The aloha source needs gym-aloha (run with a venv that has it, MUJOCO_GL=egl or osmesa).
Frame i of every camera is stamped start + i/rate exactly; cameras are received 1 ms apart.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

import numpy as np

from ros_bridge.bags import BagRecorder
from ros_bridge.camera_frame import CameraFrame, compressed_frame, raw_frame
from ros_bridge.tools.image_codec import CODEC_FORMATS, encode_rgb
from ros_bridge.tools.scene_motion import ArmMotion, MotionScript

logger = logging.getLogger(__name__)

DEFAULT_START_NS = 1_735_689_600_000_000_000  # 2025-01-01T00:00:00Z
CAMERA_RECEIVE_GAP_NS = 1_000_000


class Scene(Protocol):
    def render(self, motion_time_s: float) -> dict[str, np.ndarray]: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class RecordingConfig:
    out: Path
    frames: int = 100
    rate_hz: float = 10.0
    width: int = 640
    height: int = 480
    storage: str = "mcap"
    image_format: str = "jpeg"  # jpeg | png (CompressedImage) or rgb8 (Image)
    jpeg_quality: int = 80
    source: str = "aloha"
    cameras: tuple[str, ...] = ("top",)
    seed: int = 0
    start_ns: int = DEFAULT_START_NS


@dataclass(frozen=True, slots=True)
class RecordingSummary:
    topics: tuple[str, ...]
    frames_per_topic: int
    unique_frames_per_topic: int
    holds: tuple[range, ...]
    seconds: float
    files: dict[str, str]  # file name in the bag folder -> sha256
    bag_bytes: int


def topic_for(camera: str, image_format: str) -> str:
    """image_transport naming: raw on `image_raw`, compressed on `image_raw/compressed`."""
    base = f"/camera/{camera}/image_raw"
    return base if image_format == "rgb8" else f"{base}/compressed"


def make_scene(config: RecordingConfig) -> Scene:
    motion = ArmMotion.seeded(config.seed)
    args = (config.cameras, config.width, config.height, motion, config.seed)
    if config.source == "aloha":
        from ros_bridge.tools.aloha_scene import AlohaScene

        return AlohaScene(*args)
    if config.source == "procedural":
        from ros_bridge.tools.procedural_scene import ProceduralScene

        return ProceduralScene(*args)
    raise ValueError(f"source must be aloha or procedural, got {config.source!r}")


def to_frame(
    config: RecordingConfig, camera_index: int, pixels: np.ndarray, stamp_ns: int
) -> CameraFrame:
    camera = config.cameras[camera_index]
    topic = topic_for(camera, config.image_format)
    recv_ns = stamp_ns + (camera_index + 1) * CAMERA_RECEIVE_GAP_NS
    frame_id = f"{camera}_camera_optical_frame"
    if config.image_format == "rgb8":
        return raw_frame(topic, stamp_ns, pixels, "rgb8", recv_ns=recv_ns, frame_id=frame_id)
    data = encode_rgb(pixels, config.image_format, config.jpeg_quality)
    fmt = CODEC_FORMATS[config.image_format]
    return compressed_frame(topic, stamp_ns, data, fmt, recv_ns=recv_ns, frame_id=frame_id)


def generate(config: RecordingConfig) -> RecordingSummary:
    """Renders the scripted scene and writes it; held frames repeat the previous ones exactly."""
    script = MotionScript.with_default_holds(config.frames, config.rate_hz)
    started = time.perf_counter()
    scene = make_scene(config)
    frames: list[CameraFrame] = []
    rendered = 0
    try:
        with BagRecorder(config.out, config.storage) as recorder:
            for index, motion_time_s in enumerate(script.motion_times_s()):
                stamp_ns = config.start_ns + round(index * 1e9 / config.rate_hz)
                if not script.is_held(index):
                    images = scene.render(motion_time_s)
                    frames = [
                        to_frame(config, k, images[c], stamp_ns)
                        for k, c in enumerate(config.cameras)
                    ]
                    rendered += 1
                else:
                    frames = [_restamp(f, stamp_ns) for f in frames]
                for frame in frames:
                    recorder.write(frame)
                _log_progress(index + 1, config.frames, rendered, started)
    finally:
        scene.close()
    return _summarize(config, script, rendered, time.perf_counter() - started)


def _restamp(frame: CameraFrame, stamp_ns: int) -> CameraFrame:
    return replace(frame, stamp_ns=stamp_ns, recv_ns=frame.recv_ns - frame.stamp_ns + stamp_ns)


def _log_progress(done: int, total: int, rendered: int, started: float) -> None:
    if done % max(1, total // 10) == 0 or done == total:
        elapsed = time.perf_counter() - started
        logger.info(
            "frame %d/%d (%d rendered), %.2f frames/s", done, total, rendered, done / elapsed
        )


def _summarize(
    config: RecordingConfig, script: MotionScript, rendered: int, seconds: float
) -> RecordingSummary:
    files = sorted(p for p in config.out.iterdir() if p.is_file())
    return RecordingSummary(
        topics=tuple(topic_for(c, config.image_format) for c in config.cameras),
        frames_per_topic=config.frames,
        unique_frames_per_topic=rendered,
        holds=script.holds,
        seconds=seconds,
        files={p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in files},
        bag_bytes=sum(p.stat().st_size for p in files),
    )


def parse_args(argv: list[str] | None = None) -> RecordingConfig:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="bag folder to create (must not exist)")
    parser.add_argument("--frames", type=int, default=100)
    parser.add_argument("--rate", type=float, default=10.0, help="frames per second (Hz)")
    parser.add_argument("--size", default="640x480", help="WIDTHxHEIGHT")
    parser.add_argument("--storage", choices=["mcap", "sqlite3"], default="mcap")
    parser.add_argument("--format", choices=["jpeg", "png", "rgb8"], default="jpeg")
    parser.add_argument("--jpeg-quality", type=int, default=80)
    parser.add_argument("--source", choices=["aloha", "procedural"], default="aloha")
    parser.add_argument("--cameras", default="top", help="comma-separated camera names")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--start-ns", type=int, default=DEFAULT_START_NS)
    args = parser.parse_args(argv)
    width, height = (int(v) for v in args.size.lower().split("x"))
    return RecordingConfig(
        out=args.out,
        frames=args.frames,
        rate_hz=args.rate,
        width=width,
        height=height,
        storage=args.storage,
        image_format=args.format,
        jpeg_quality=args.jpeg_quality,
        source=args.source,
        cameras=tuple(args.cameras.split(",")),
        seed=args.seed,
        start_ns=args.start_ns,
    )


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    config = parse_args(argv)
    summary = generate(config)
    held = ", ".join(f"{h.start}-{h.stop - 1}" for h in summary.holds) or "none"
    logger.info(
        "wrote %s: %s, %d frames/topic (%d unique; held frames %s), %d bytes, %.1f s",
        config.out,
        ", ".join(summary.topics),
        summary.frames_per_topic,
        summary.unique_frames_per_topic,
        held,
        summary.bag_bytes,
        summary.seconds,
    )
    for name, digest in summary.files.items():
        logger.info("sha256 %s  %s", digest, name)


if __name__ == "__main__":
    main()
