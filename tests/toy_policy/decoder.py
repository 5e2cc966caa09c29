"""The toy's actions: the denoised chunk's first `action_dim` dims, as they are."""

from __future__ import annotations

from vla_server.policies.base import ActionOutput, ActionStep, first_actions


class ToyDecoder:
    def __init__(self, action_dim: int):
        self.action_dim = action_dim

    def step(self, out: ActionOutput) -> ActionStep:
        if out.chunk is None:
            return ActionStep([], 0)
        chunk = out.chunk.to_numpy()[:, : self.action_dim]
        return first_actions(chunk.tolist(), out.num_actions)
