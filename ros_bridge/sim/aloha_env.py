"""gym-aloha's bimanual ViperX arms (MuJoCo): stepped by joint targets, rendered offscreen.

Needs `gym-aloha` (the `[sim]` extra) and an offscreen GL chosen before MuJoCo loads:
`MUJOCO_GL=osmesa` (Debian's libosmesa6) on a CPU machine, `egl` where a GPU is.

Actions and positions follow gym-aloha: per arm 6 joint angles (rad) and the gripper normalised
to [0, 1] (0 closed, 1 open), left arm first (`JOINTS`). One `step` is one control period of
simulated time (by default 20 ms, the task's own). Rendering uses a second copy of the physics,
loaded from a `snapshot()` of the joint positions, so one thread can render (MuJoCo lets go of
the GIL meanwhile) while another keeps stepping. `fast_render` turns shadows and anti-aliasing
off.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

DEFAULT_ENV = "gym_aloha/AlohaInsertion-v0"


class AlohaEnv:
    def __init__(
        self,
        env_id: str,
        seed: int,
        cameras: Sequence[str],
        width: int,
        height: int,
        control_period_s: float | None = None,
        fast_render: bool = False,
    ) -> None:
        import gym_aloha  # noqa: F401  (registers the gym_aloha/* environments)
        import gymnasium
        from gym_aloha.constants import JOINTS

        self._env = gymnasium.make(env_id, obs_type="pixels_agent_pos")
        self._env.reset(seed=seed)
        # The gym wrapper hides its dm_control environment; we need its task and physics.
        self._control = self._env.unwrapped._env
        self._physics = self._control.physics
        self._renderer = self._physics.copy(share_model=True)
        if fast_render:
            # Shadow maps and 4x multisampling are ~85% of osmesa's rendering time (86 -> 12 ms
            # of CPU per 640x480 frame); the frames lose shadows and anti-aliasing.
            quality = self._renderer.model.vis.quality
            quality.shadowsize, quality.offsamples = 0, 0
        self.joint_names: list[str] = list(JOINTS)
        self.control_period_s: float = control_period_s or self._control.control_timestep()
        self._sub_steps = round(self.control_period_s / self._physics.timestep())
        self._cameras, self._width, self._height = list(cameras), width, height
        self._check_cameras()

    def positions(self) -> np.ndarray:
        """The arms' joint positions, in action order (what gym-aloha calls agent_pos)."""
        return np.asarray(self._control.task.get_qpos(self._physics), dtype=np.float64)

    def step(self, targets: Sequence[float]) -> None:
        """One control period towards `targets`: dm_control's Environment.step minus its
        observation, which renders three cameras every step (~5x the cost of the physics)."""
        action = np.asarray(targets, dtype=np.float64)
        task = self._control.task
        task.before_step(action, self._physics)
        self._physics.step(self._sub_steps)
        task.after_step(self._physics)

    def snapshot(self) -> np.ndarray:
        return self._physics.data.qpos.copy()

    def render(self, snapshot: np.ndarray) -> dict[str, np.ndarray]:
        """(H, W, 3) uint8 RGB per camera of the scene as it was at `snapshot`."""
        with self._renderer.reset_context():  # computes the poses from the joint positions
            self._renderer.data.qpos[:] = snapshot
        return {
            camera: self._renderer.render(height=self._height, width=self._width, camera_id=camera)
            for camera in self._cameras
        }

    def free_renderer(self) -> None:
        """Frees the rendering copy's GL context; call it on the thread that rendered (an EGL
        context stays current on its thread and cannot be freed from another)."""
        self._renderer.free()

    def close(self) -> None:
        # Free the GL contexts (the gym reset rendered with the first physics too) here: left
        # to the garbage collector, their __del__ can wait forever on dm_control's render thread.
        self._env.close()
        self._renderer.free()  # nothing left to do if free_renderer() ran
        self._physics.free()

    def _check_cameras(self) -> None:
        model = self._physics.model
        known = [model.camera(i).name for i in range(model.ncam)]
        unknown = [c for c in self._cameras if c not in known]
        if unknown:
            raise ValueError(f"unknown ALOHA camera(s) {unknown}; the scene has {known}")
