"""SmolVLA's action head for the engine: the model half's action expert and flow heads
(`expert.py`, `flow_head.py`) over a batch's prefix K/V in the paged pool, and the state
token's projection.

* `velocity(prefix, x_t, time, state)`: each VLM layer's post-RoPE prefix K/V gathered from the
  pool (`PagedPrefix.kv`; the decoder wrote them during the prefill), made into the expert's
  context as the model half makes it from its own `PrefixKV` (cross layers project them with
  the expert's k/v), then one expert pass over the batch's chunks. Each row's prefix length is
  its own: padding is masked, and the actions' positions start at the row's length. `state`
  is not read: SmolVLA's state is the prompt's last token.
* `embed_state(state)`: `state_proj` of the normalised, padded state, unscaled: the embedding
  the prefill puts at the prompt's state position (`model.parts.StateTokenHead`).

The cross layers' K'/V' depend on the prefix only; they are recomputed at every pass (one
k/v projection of the prefix per cross layer), which keeps the head stateless across passes.

Tensors (bare or under `model.`): `vlm_with_expert.lm_expert.*`, `state_proj.*`,
`action_in_proj.*`, `action_out_proj.*`, `action_time_mlp_{in,out}.*`. The expert is held in
the engine's dtype, the flow heads and `state_proj` in float32 (as `weights.py` loads them).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from vla_server.model.denoise import check_chunk_inputs
from vla_server.model.paged_prefix import PagedPrefix
from vla_server.model.weight_loader import (
    LoadPlan,
    WeightSources,
    copy_planned,
    header_shapes,
    plan_weights,
    tensor_files,
)
from vla_server.policies.smolvla.config import SmolVLAConfig
from vla_server.policies.smolvla.expert import ActionExpert
from vla_server.policies.smolvla.flow_head import FlowHead
from vla_server.policies.smolvla.prefix_kv import PrefixKV
from vla_server.policies.smolvla.weights import EXPERT, LEROBOT_PREFIX

HEADS = ("state_proj", "action_in_proj", "action_out_proj", "action_time_mlp_in",
         "action_time_mlp_out")  # fmt: skip
# Our parameter prefix -> the checkpoint's (bare names).
RENAMES = (("expert.", EXPERT), ("flow.", ""), ("state_proj.", "state_proj."))


def head_name(name: str) -> str | None:
    """A checkpoint name without `model.` when it is this head's tensor; None otherwise."""
    bare = name.removeprefix(LEROBOT_PREFIX)
    if bare.startswith(EXPERT) or bare.split(".", 1)[0] in HEADS:
        return bare
    return None


class PagedActionHead(nn.Module):
    def __init__(self, c: SmolVLAConfig, *, dtype: torch.dtype, device: torch.device | str):
        super().__init__()
        with torch.device("meta"):  # every parameter comes from the checkpoint
            self.expert = ActionExpert(c)
            self.flow = FlowHead(c.expert.hidden_size, c.max_action_dim, c.min_period,
                                 c.max_period)  # fmt: skip
            self.state_proj = nn.Linear(c.max_state_dim, c.text.hidden_size)
        self.to_empty(device=device)
        self.expert.to(dtype)
        self.chunk_size = c.chunk_size
        self.width = c.max_action_dim
        self.state_width = c.max_state_dim
        self.requires_grad_(False).eval()

    def owns(self, name: str) -> bool:
        return head_name(name) is not None

    def weight_sources(self) -> WeightSources:
        """Our parameter -> its checkpoint tensor (bare name) and shape."""
        src: WeightSources = {}
        for name, param in self.named_parameters():
            ours, theirs = next((o, t) for o, t in RENAMES if name.startswith(o))
            src[name] = [(theirs + name[len(ours) :], tuple(param.shape))]
        return src

    def plan_weights(self, model_path: str | Path) -> tuple[LoadPlan, dict[str, Path]]:
        files = tensor_files(model_path)
        found = header_shapes(files, head_name)
        return plan_weights(self.weight_sources(), found), files

    def load_weights(self, plan: tuple[LoadPlan, dict[str, Path]], *, progress: bool = True):
        copy_planned(self, plan[0], plan[1], progress=progress)

    def embed_state(self, state: torch.Tensor) -> torch.Tensor:
        """Normalised states [B, max_state_dim] -> float32 prompt embeddings [B, VLM width]."""
        if state.dim() != 2 or state.shape[1] != self.state_width:
            raise ValueError(f"state must be [B, {self.state_width}], got {list(state.shape)}")
        return self.state_proj(state.to(torch.float32))

    def velocity(
        self,
        prefix: PagedPrefix,
        x_t: torch.Tensor,
        time: torch.Tensor,
        state: torch.Tensor | None,
    ) -> torch.Tensor:
        """float32 velocity [B, chunk_size, max_action_dim] over the prefixes in the pool."""
        rows = prefix.batch_size
        check_chunk_inputs(x_t, time, rows, self.chunk_size, self.width)
        layers = [prefix.kv(n) for n in range(len(self.expert.layers))]
        kv = PrefixKV([k for k, _ in layers], [v for _, v in layers], prefix.valid)
        ctx = self.expert.context(kv)
        return self.flow.velocity(self.expert(self.flow.embed(x_t, time), ctx))
