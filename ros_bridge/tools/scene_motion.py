"""The deterministic script a generated recording follows: arm motion and held-still stretches."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Peak offset from the home pose per ALOHA joint (rad; the gripper is normalized 0..1):
# waist, shoulder, elbow, forearm roll, wrist angle, wrist rotate, gripper.
JOINT_SPAN = np.array([0.4, 0.25, 0.25, 0.3, 0.3, 0.5, 0.45])
NUM_ARMS = 2


@dataclass(frozen=True, slots=True)
class ArmMotion:
    """Smooth sinusoidal joint offsets for two 7-DoF arms, zero at t=0 so motion starts at home."""

    amplitudes: np.ndarray  # (2, 7)
    frequencies_hz: np.ndarray  # (2, 7)

    @classmethod
    def seeded(cls, seed: int) -> ArmMotion:
        rng = np.random.default_rng(seed)
        signs = rng.choice([-1.0, 1.0], size=(NUM_ARMS, JOINT_SPAN.size))
        amplitudes = signs * rng.uniform(0.5, 1.0, size=(NUM_ARMS, JOINT_SPAN.size)) * JOINT_SPAN
        frequencies = rng.uniform(0.15, 0.4, size=(NUM_ARMS, JOINT_SPAN.size))
        return cls(amplitudes, frequencies)

    def offsets(self, t_s: float) -> np.ndarray:
        return self.amplitudes * np.sin(2 * np.pi * self.frequencies_hz * t_s)


@dataclass(frozen=True, slots=True)
class MotionScript:
    """Which frames are held still (scene paused: the frame repeats the previous one exactly)."""

    num_frames: int
    rate_hz: float
    holds: tuple[range, ...]

    @classmethod
    def with_default_holds(cls, num_frames: int, rate_hz: float) -> MotionScript:
        """Two stretches: from 25 % of the frames, n//12 (>= 2) long; from 60 %, n//8 (>= 3)."""
        if num_frames < 8:
            return cls(num_frames, rate_hz, ())
        first = range(round(0.25 * num_frames), round(0.25 * num_frames) + max(2, num_frames // 12))
        second = range(round(0.6 * num_frames), round(0.6 * num_frames) + max(3, num_frames // 8))
        return cls(num_frames, rate_hz, (first, second))

    def is_held(self, index: int) -> bool:
        return index > 0 and any(index in hold for hold in self.holds)

    def motion_times_s(self) -> list[float]:
        """Scene time per frame: it advances 1/rate per frame, except across held frames."""
        times, moving_frames = [], 0
        for index in range(self.num_frames):
            if index > 0 and not self.is_held(index):
                moving_frames += 1
            times.append(moving_frames / self.rate_hz)
        return times
