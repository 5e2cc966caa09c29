"""The ALOHA transfer-cube scene (gym-aloha / MuJoCo), rendered offscreen while scripted arms move.

Needs `gym-aloha` (the `[sim]` extra) and an offscreen GL: MUJOCO_GL=egl (default here) or
osmesa.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from ros_bridge.tools.scene_motion import ArmMotion

ENV_ID = "gym_aloha/AlohaTransferCube-v0"
GRIPPER_INDICES = (6, 13)  # in the 14-long action: normalized gripper of each arm


class AlohaScene:
    """Steps the simulator with joint-position actions up to each frame's time, then renders.

    Actions follow gym-aloha's: 6 joint angles + a normalized gripper per arm, applied by the
    task every 20 ms of simulated time (its control rate), whatever the recording rate.
    """

    def __init__(
        self, cameras: Sequence[str], width: int, height: int, motion: ArmMotion, seed: int
    ) -> None:
        os.environ.setdefault("MUJOCO_GL", "egl")  # must be set before MuJoCo loads
        from ros_bridge.sim.aloha_env import AlohaEnv

        self._env = AlohaEnv(ENV_ID, seed, cameras, width, height)
        self._home = self._env.positions()
        self._motion, self._sim_time = motion, 0.0
        self._control_dt = self._env.control_period_s

    def render(self, motion_time_s: float) -> dict[str, np.ndarray]:
        while self._sim_time + self._control_dt / 2 <= motion_time_s:
            self._sim_time += self._control_dt
            self._env.step(self._action(self._sim_time))
        return self._env.render(self._env.snapshot())

    def close(self) -> None:
        self._env.close()

    def _action(self, t_s: float) -> np.ndarray:
        action = self._home + self._motion.offsets(t_s).reshape(-1)
        grippers = list(GRIPPER_INDICES)
        action[grippers] = np.clip(action[grippers], 0.0, 1.0)
        return action.astype(np.float32)
