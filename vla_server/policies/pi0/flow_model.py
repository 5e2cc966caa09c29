"""A pi0 / pi0.5 policy's flow half: the action expert and the flow heads, computing the
velocity v(x_t, t) of a batch of action chunks over their prefixes in the paged KV pool.

The runner prefills the prefix (images + prompt) through the backbone like any prompt; each
denoising step is then one `FlowModel` pass per batch: embed the suffix, run the expert over
[prefix K/V ; suffix], project the velocity (`action_expert.py`, `flow_head.py`). The
integration (`flow_matching.py`) belongs to the caller. Parameter names follow the checkpoint's
(`weight_sources`, loaded by `flow_weights.py`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch
from torch import nn

from vla_server.model.config import ModelConfig, decoder_dimensions
from vla_server.model.denoise import check_chunk_inputs
from vla_server.model.llama import layer_weight_sources
from vla_server.model.paged_prefix import PagedPrefix
from vla_server.model.weight_loader import WeightSources
from vla_server.policies.pi0.action_expert import ActionExpert, SuffixAttention
from vla_server.policies.pi0.flow_head import (
    FlowHead,
    Pi0Head,
    Pi05Head,
    time_embedding,
    time_frequencies,
    velocity,
)
from vla_server.policies.pi0.flow_keys import EXPERT_PREFIX, FLOW_TYPES
from vla_server.policies.pi0.flow_weights import (
    FlowWeights,
    is_flow_tensor,
    load_flow_weights,
    plan_flow_weights,
)
from vla_server.policies.pi_common.lerobot_config import LeRobotPolicySpec
from vla_server.policies.pi_common.paligemma_config import expert_config


def expert_model_config(backbone: ModelConfig, spec: LeRobotPolicySpec) -> ModelConfig:
    """The action expert as a decoder config: its own Gemma dimensions, norm and RoPE settings,
    the backbone's everything else. Its layer l attends to the backbone's layer-l K/V, so depth,
    KV heads and head size must be the backbone's (openpi asserts the same)."""
    text = expert_config(spec)
    expert = replace(
        backbone,
        architecture="gemma_expert",
        **decoder_dimensions(text),
        hidden_act=getattr(text, "hidden_act", "gelu_pytorch_tanh"),
        embed_scale=1.0,
        prefix_lm=False,
        image_token_id=None,
    )
    for name in ("num_layers", "num_kv_heads", "head_dim"):
        if getattr(expert, name) != getattr(backbone, name):
            raise ValueError(
                f"the action expert's {name} ({getattr(expert, name)}) must equal the "
                f"backbone's ({getattr(backbone, name)})"
            )
    return expert


class FlowModel(nn.Module):
    def __init__(
        self,
        config: ModelConfig,
        spec: LeRobotPolicySpec,
        *,
        dtype: torch.dtype,
        device: str,
        max_positions: int,
    ):
        """`config`: the expert's decoder config (`expert_model_config`)."""
        super().__init__()
        if spec.policy_type not in FLOW_TYPES:
            raise ValueError(f"a {spec.policy_type!r} policy has no action expert")
        self.config = config
        self.spec = spec
        self.kind = spec.policy_type
        width = config.hidden_size
        self.head: FlowHead = (
            Pi0Head(width, spec.max_state_dim, spec.max_action_dim, dtype, str(device))
            if self.kind == "pi0"
            else Pi05Head(width, spec.max_action_dim, dtype, str(device))
        )
        self.expert = ActionExpert(
            config,
            adaptive=self.kind == "pi05",
            dtype=dtype,
            device=str(device),
            max_positions=max_positions,
        )
        self.frequencies = time_frequencies(width, spec.min_period, spec.max_period, device)
        self.chunk_size = spec.chunk_size
        self.width = spec.max_action_dim

    @property
    def suffix_len(self) -> int:
        return self.spec.chunk_size + int(self.head.has_state_token)

    @property
    def has_state_token(self) -> bool:
        return self.head.has_state_token

    def forward(
        self,
        x_t: torch.Tensor,
        time: torch.Tensor,
        state: torch.Tensor | None,
        attention: SuffixAttention,
    ) -> torch.Tensor:
        """float32 velocity [B, chunk_size, max_action_dim] of x_t (same shape) at times [B];
        `state` [B, max_state_dim] (pi0; None means zeros)."""
        self._check_inputs(x_t, time, state, attention.batch_size)
        if state is None:
            state = x_t.new_zeros((x_t.shape[0], self.spec.max_state_dim))
        t_emb = time_embedding(time, self.frequencies)
        suffix, cond = self.head.embed(x_t, t_emb, state)
        out = self.expert(suffix, cond, attention)
        return velocity(self.head, out, self.spec.chunk_size)

    def _check_inputs(
        self, x_t: torch.Tensor, time: torch.Tensor, state: torch.Tensor | None, rows: int
    ) -> None:
        spec = self.spec
        check_chunk_inputs(x_t, time, rows, spec.chunk_size, spec.max_action_dim)
        if state is not None and tuple(state.shape) != (rows, spec.max_state_dim):
            raise ValueError(
                f"state must be [{rows}, {spec.max_state_dim}], got {list(state.shape)}"
            )

    def velocity(
        self,
        prefix: PagedPrefix,
        x_t: torch.Tensor,
        time: torch.Tensor,
        state: torch.Tensor | None,
    ) -> torch.Tensor:
        """The `ActionHead` pass over `prefix`: pi0 reads `state`, pi0.5 ignores it."""
        attention = prefix.memo(
            "suffix_attention",
            lambda: SuffixAttention.build(prefix, self.suffix_len, self.has_state_token),
        )
        return self(x_t, time, state if self.kind == "pi0" else None, attention)

    def owns(self, name: str) -> bool:
        return is_flow_tensor(name)

    def plan_weights(self, model_path: str | Path) -> FlowWeights:
        return plan_flow_weights(self.kind, self.weight_sources(), model_path)

    def load_weights(self, plan: FlowWeights, *, progress: bool = True) -> None:
        load_flow_weights(self, plan, progress=progress)

    def weight_sources(self) -> WeightSources:
        """Our parameter -> the checkpoint tensors (names without the `model.` prefix)."""
        c = self.config
        src: WeightSources = {}
        for name, param in self.head.named_parameters():
            src["head." + name] = [(name, tuple(param.shape))]
        expert = EXPERT_PREFIX + "model."
        for i in range(c.num_layers):
            ours, theirs = f"expert.layers.{i}.", f"{expert}layers.{i}."
            src.update(layer_weight_sources(c, ours, theirs))
            for norm in ("input_layernorm", "post_attention_layernorm"):
                src.update(self._norm_sources(f"{ours}{norm}", f"{theirs}{norm}"))
        src.update(self._norm_sources("expert.norm", expert + "norm"))
        return src

    def _norm_sources(self, ours: str, theirs: str) -> WeightSources:
        """A norm's `weight` (pi0) or `dense.{weight,bias}` (pi0.5's adaRMS)."""
        return {
            f"{ours}.{name}": [(f"{theirs}.{name}", tuple(param.shape))]
            for name, param in self.get_submodule(ours).named_parameters()
        }
