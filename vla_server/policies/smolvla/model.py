"""SmolVLA (LeRobot `smolvla`): SmolVLM2's vision and truncated text decoder for the prefix,
and a narrow action expert that denoises a chunk by flow matching over the prefix's K/V.

The serving split:

1. `prefix_kv(inputs)` once per observation: each VLM layer's post-RoPE K/V over the row's
   valid prefix tokens (`PrefixKV`; a server pages these).
2. `expert_context(prefix)` once per prefix (or per batch gathered from pages): the K/V each
   expert layer attends to, cross layers' projection included (`ExpertContext`).
3. `velocity(context, x_t, time)` per denoising step, any mix of rows: each row its own prefix
   length (the context's `valid` mask), its own x_t and time. The state is not an argument:
   SmolVLA puts it in the prefix as its last token.

`sample_actions` strings these together with the Euler steps of `vla_server.model.denoise`.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from vla_server.model.denoise import check_chunk_inputs, denoise_times, euler_update, initial_noise
from vla_server.policies.smolvla.config import SmolVLAConfig, read_config
from vla_server.policies.smolvla.expert import ActionExpert, ExpertContext
from vla_server.policies.smolvla.flow_head import FlowHead
from vla_server.policies.smolvla.prefix import PrefixEncoder, PrefixInputs
from vla_server.policies.smolvla.prefix_kv import PrefixKV
from vla_server.policies.smolvla.processor import image_special_ids, load_tokenizer
from vla_server.policies.smolvla.weights import load_weights


class SmolVLA(nn.Module):
    def __init__(
        self,
        config: SmolVLAConfig,
        image_start_ids: list[int] | None = None,
        image_end_ids: list[int] | None = None,
    ):
        super().__init__()
        self.config = config
        self.prefix = PrefixEncoder(config, image_start_ids or [], image_end_ids or [])
        self.expert = ActionExpert(config)
        self.head = FlowHead(
            config.expert.hidden_size, config.max_action_dim, config.min_period, config.max_period
        )

    @classmethod
    def from_folder(
        cls,
        folder: str | Path,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> SmolVLA:
        """The policy in a LeRobot `smolvla` folder; the flow heads stay float32."""
        config = read_config(folder)
        start, end = image_special_ids(config, load_tokenizer(config))
        with torch.device("meta"):
            model = cls(config, start, end)
        load_weights(model, folder, dtype=dtype, device=device)
        return model.requires_grad_(False).eval()

    @property
    def device(self) -> torch.device:
        return self.head.action_in_proj.weight.device

    @torch.no_grad()
    def prefix_kv(self, inputs: PrefixInputs) -> PrefixKV:
        return self.prefix(inputs)

    @torch.no_grad()
    def expert_context(self, prefix: PrefixKV) -> ExpertContext:
        return self.expert.context(prefix)

    @torch.no_grad()
    def velocity(self, ctx: ExpertContext, x_t: torch.Tensor, time: torch.Tensor) -> torch.Tensor:
        """float32 velocity [B, H, max_action_dim] of x_t (same shape) at times [B]."""
        c = self.config
        rows = ctx.batch_size
        check_chunk_inputs(x_t, time, rows, c.chunk_size, c.max_action_dim)
        return self.head.velocity(self.expert(self.head.embed(x_t, time), ctx))

    def initial_noise(self, seeds: list[int | None]) -> torch.Tensor:
        """[B, H, max_action_dim] float32: each row's seeded (or fresh) noise, on the CPU as
        `vla_server.model.denoise.initial_noise` draws it, then moved to the model."""
        c = self.config
        rows = [initial_noise(s, c.chunk_size, c.max_action_dim) for s in seeds]
        return torch.cat(rows).to(self.device)

    @torch.no_grad()
    def sample_actions(self, inputs: PrefixInputs, noise: torch.Tensor) -> torch.Tensor:
        """The normalized chunk [B, H, max_action_dim] from `noise` (same shape)."""
        ctx = self.expert_context(self.prefix_kv(inputs))
        steps = self.config.num_steps
        x = noise.to(device=self.device, dtype=torch.float32)
        for t in denoise_times(steps):
            time = torch.full((x.shape[0],), t, dtype=torch.float32, device=x.device)
            x = euler_update(x, self.velocity(ctx, x, time), steps)
        return x
