"""pi0 / pi0.5's denoised chunk -> the request's one `actions` message.

No tokens stream for these requests: the scheduler sends the chunk (normalised, padded to
`max_action_dim`) with the request's end, and here its first `action_dim` dims are
unnormalised (`FlowActionPolicy.unnormalize`) and its first `count` actions go out (all of them
when the request asked for none). A request that ends otherwise (abort, deadline) has no chunk.
"""

from __future__ import annotations

import numpy as np

from vla_server.io_struct import Tensor
from vla_server.policies.bin_actions.detokenizer import ActionStep
from vla_server.policies.pi0.flow_actions import FlowActionPolicy


def chunk_actions(policy: FlowActionPolicy, chunk: Tensor | None, count: int) -> ActionStep:
    if chunk is None:
        return ActionStep([], 0)
    actions = policy.unnormalize(chunk.to_numpy())
    if not np.isfinite(actions).all():
        return ActionStep([], 0, "the denoised chunk or its statistics give a non-finite action")
    out = actions[: count or len(actions)].tolist()
    return ActionStep(out, len(out))
