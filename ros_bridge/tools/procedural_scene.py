"""A numpy-drawn stand-in for the ALOHA scene: table, cube and two moving arms (no simulator)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ros_bridge.tools.scene_motion import ArmMotion

ARM_BASES = ((0.18, 0.92), (0.82, 0.92))  # scene coords: x right, y down, in units of image height
LINK_LENGTHS = (0.3, 0.22, 0.08)
HOME_ANGLES = ((-1.7, 1.0, 0.6), (-1.44, -1.0, -0.6))  # rad, relative; mirror images
ARM_COLOR = np.array([38.0, 38.0, 44.0])
JOINT_COLOR = np.array([90.0, 92.0, 100.0])
CUBE_COLOR = np.array([200.0, 30.0, 30.0])


class ProceduralScene:
    """Renders each camera as a shifted/zoomed view of one 2-D scene driven by `motion`."""

    def __init__(
        self, cameras: Sequence[str], width: int, height: int, motion: ArmMotion, seed: int
    ) -> None:
        self._cameras = list(cameras)
        self._width, self._height = width, height
        self._motion = motion
        rng = np.random.default_rng(seed)
        self._backdrops = [self._backdrop(k, rng) for k in range(len(self._cameras))]

    def render(self, motion_time_s: float) -> dict[str, np.ndarray]:
        offsets = self._motion.offsets(motion_time_s)
        frames = {}
        for k, camera in enumerate(self._cameras):
            image = self._backdrops[k].copy()
            self._draw_cube(image, k, motion_time_s)
            for arm in range(len(ARM_BASES)):
                self._draw_arm(image, k, arm, offsets[arm])
            frames[camera] = np.clip(image, 0, 255).astype(np.uint8)
        return frames

    def close(self) -> None:
        """Nothing to release (same interface as the simulator scene)."""

    def _to_pixels(self, view: int, points: np.ndarray) -> np.ndarray:
        # The scene's unit square sits centred; extra cameras look from the side and closer.
        zoom = (1.0 + 0.15 * view) * self._height
        origin = np.array(
            [(self._width - zoom) / 2 - 0.08 * view * self._width, -0.6 * (zoom - self._height)]
        )
        return points * zoom + origin

    def _backdrop(self, view: int, rng: np.random.Generator) -> np.ndarray:
        h, w = self._height, self._width
        rows = np.linspace(0.0, 1.0, h)[:, None, None]
        image = np.broadcast_to(np.array([70.0, 80.0, 95.0]) + 50.0 * rows, (h, w, 3)).copy()
        table_corners = np.array([[-0.1, 0.45], [1.1, 0.45], [1.4, 1.1], [-0.4, 1.1]])
        table = self._to_pixels(view, table_corners)
        grain = rng.normal(0.0, 6.0, size=(h, 1, 1)) + rng.normal(0.0, 3.0, size=(h, w, 1))
        _fill_convex(image, table, np.array([150.0, 120.0, 85.0]), texture=grain)
        return image

    def _draw_cube(self, image: np.ndarray, view: int, t_s: float) -> None:
        center = np.array([0.62 + 0.06 * np.sin(0.35 * t_s), 0.66])
        angle, half = 0.4 * t_s, 0.04
        corners = np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]], dtype=float) * half
        rotation = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
        _fill_convex(image, self._to_pixels(view, corners @ rotation.T + center), CUBE_COLOR)

    def _draw_arm(self, image: np.ndarray, view: int, arm: int, offsets: np.ndarray) -> None:
        # Planar chain: waist + shoulder turn the first link, elbow and wrist the next two.
        angles = np.cumsum(np.array(HOME_ANGLES[arm]) + offsets[[0, 2, 4]] + [offsets[1], 0, 0])
        points = [np.array(ARM_BASES[arm])]
        for length, angle in zip(LINK_LENGTHS, angles, strict=True):
            points.append(points[-1] + length * np.array([np.cos(angle), np.sin(angle)]))
        pixels = self._to_pixels(view, np.array(points))
        radius = 0.022 * self._height * (1.0 + 0.15 * view)
        for start, end in zip(pixels[:-1], pixels[1:], strict=True):
            _draw_segment(image, start, end, radius, ARM_COLOR)
        for joint in pixels[:-1]:
            _draw_segment(image, joint, joint, radius * 1.3, JOINT_COLOR)
        self._draw_gripper(image, pixels[-1], angles[-1], radius, offsets[6])

    def _draw_gripper(
        self, image: np.ndarray, tip: np.ndarray, angle: float, radius: float, opening: float
    ) -> None:
        along = np.array([np.cos(angle), np.sin(angle)])
        across = np.array([-along[1], along[0]]) * radius * (0.5 + np.clip(0.5 + opening, 0, 1))
        for side in (-1.0, 1.0):
            root = tip + side * across
            _draw_segment(image, root, root + 1.6 * radius * along, radius * 0.45, ARM_COLOR)


def _bbox(image: np.ndarray, points: np.ndarray, pad: float) -> tuple[slice, slice, np.ndarray]:
    h, w = image.shape[:2]
    x0, y0 = np.maximum(np.floor(points.min(axis=0) - pad), 0).astype(int)
    x1, y1 = np.minimum(np.ceil(points.max(axis=0) + pad) + 1, [w, h]).astype(int)
    ys, xs = np.mgrid[y0 : max(y0, y1), x0 : max(x0, x1)]
    grid = np.stack([xs, ys], axis=-1).astype(float) + 0.5
    return slice(y0, max(y0, y1)), slice(x0, max(x0, x1)), grid


def _draw_segment(
    image: np.ndarray, start: np.ndarray, end: np.ndarray, radius: float, color: np.ndarray
) -> None:
    rows, cols, grid = _bbox(image, np.stack([start, end]), radius + 1)
    direction = end - start
    length_sq = float(direction @ direction) or 1.0
    along = np.clip(((grid - start) @ direction) / length_sq, 0.0, 1.0)
    distance = np.linalg.norm(grid - (start + along[..., None] * direction), axis=-1)
    coverage = np.clip(radius + 0.5 - distance, 0.0, 1.0)[..., None]  # anti-aliased edge
    image[rows, cols] = image[rows, cols] * (1 - coverage) + color * coverage


def _fill_convex(
    image: np.ndarray, corners: np.ndarray, color: np.ndarray, texture: np.ndarray | None = None
) -> None:
    """Fills a convex polygon whose corners run clockwise on screen (y down)."""
    rows, cols, grid = _bbox(image, corners, 1)
    inside = np.ones(grid.shape[:2], dtype=bool)
    for a, b in zip(corners, np.roll(corners, -1, axis=0), strict=True):
        edge = b - a
        inside &= (edge[0] * (grid[..., 1] - a[1]) - edge[1] * (grid[..., 0] - a[0])) >= 0
    fill = color + (texture[rows, cols] if texture is not None else 0.0)
    image[rows, cols] = np.where(inside[..., None], fill, image[rows, cols])
