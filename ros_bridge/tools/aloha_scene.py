"""The ALOHA transfer-cube scene (gym-aloha / MuJoCo), rendered offscreen while scripted arms move.

Needs `gym-aloha` (which is not a project dependency: it pins its own MuJoCo stack, so it lives
in a separate venv) and an offscreen GL: MUJOCO_GL=egl (default here) or osmesa.
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
        import gym_aloha  # noqa: F401  (registers the gym_aloha/* environments)
        import gymnasium

        self._env = gymnasium.make(ENV_ID, obs_type="pixels_agent_pos")
        observation, _ = self._env.reset(seed=seed)
        # The gym wrapper hides its dm_control environment; we need its task and physics.
        self._control = self._env.unwrapped._env
        self._physics = self._control.physics
        self._check_cameras(cameras)
        self._cameras, self._width, self._height = list(cameras), width, height
        self._home = np.asarray(observation["agent_pos"], dtype=np.float64)
        self._motion, self._sim_time = motion, 0.0
        self._control_dt = self._control.control_timestep()
        self._sub_steps = round(self._control_dt / self._physics.timestep())

    def render(self, motion_time_s: float) -> dict[str, np.ndarray]:
        while self._sim_time + self._control_dt / 2 <= motion_time_s:
            self._sim_time += self._control_dt
            self._step(self._action(self._sim_time))
        return {
            camera: self._physics.render(height=self._height, width=self._width, camera_id=camera)
            for camera in self._cameras
        }

    def _step(self, action: np.ndarray) -> None:
        # dm_control's Environment.step minus its observation, which renders three 640x480
        # cameras every 20 ms control step (~5x the cost of the physics, and never used here).
        task = self._control.task
        task.before_step(action, self._physics)
        self._physics.step(self._sub_steps)
        task.after_step(self._physics)

    def close(self) -> None:
        self._env.close()

    def _action(self, t_s: float) -> np.ndarray:
        action = self._home + self._motion.offsets(t_s).reshape(-1)
        grippers = list(GRIPPER_INDICES)
        action[grippers] = np.clip(action[grippers], 0.0, 1.0)
        return action.astype(np.float32)

    def _check_cameras(self, cameras: Sequence[str]) -> None:
        model = self._physics.model
        known = [model.camera(i).name for i in range(model.ncam)]
        unknown = [c for c in cameras if c not in known]
        if unknown:
            raise ValueError(f"unknown ALOHA camera(s) {unknown}; the scene has {known}")
