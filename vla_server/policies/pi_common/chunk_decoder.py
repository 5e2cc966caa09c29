"""A flow policy's denoised chunk (pi0, pi0.5, SmolVLA) -> the request's `actions` message.

No tokens stream for these requests: the scheduler sends the chunk (normalised, padded to
`max_action_dim`) with the request's end, and here its first `action_dim` dims are
unnormalised (`FlowActionPolicy.unnormalize`) and its first `count` actions go out (all of them
when the request asked for none). A request that ends otherwise (abort, deadline) has no chunk.
"""

from __future__ import annotations

import numpy as np

from vla_server.policies.base import ActionOutput, ActionStep, first_actions
from vla_server.policies.pi_common.flow_actions import FlowActionPolicy


class ChunkDecoder:
    def __init__(self, policy: FlowActionPolicy):
        self.policy = policy

    def step(self, out: ActionOutput) -> ActionStep:
        if out.chunk is None:
            return ActionStep([], 0)
        actions = self.policy.unnormalize(out.chunk.to_numpy())
        if not np.isfinite(actions).all():
            return ActionStep(
                [], 0, "the denoised chunk or its statistics give a non-finite action"
            )
        return first_actions(actions.tolist(), out.num_actions)
