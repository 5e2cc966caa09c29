"""One pi0 / pi0.5 observation through two model paths, phase by phase, in this process: the
node's (`ModelRunner`: vision tower, decoder prefill into the paged pool, action-head passes)
and transformers' (`hf_reference.hf_policy`: `embed_prefix`, the PaliGemma prefix cache,
`sample_actions`' denoising loop). Both get the same pixels, token ids, state and noise, so
their chunks must agree; `phases.py` times them."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vla_server.model.denoise import denoise_times, euler_update

PHASES = ("vision", "prefix", "denoise")
INSTRUCTION = "pick up the red block and put it in the bowl"


@dataclass
class Observation:
    pixels: torch.Tensor  # [cameras, 3, S, S] in [-1, 1]
    text_ids: list[int]
    state: torch.Tensor  # [max_state_dim] normalised, zero-padded
    noise: torch.Tensor  # [1, chunk, max_action_dim]


def observation(folder: Path, seed: int) -> Observation:
    """Two random frames at the folder's resolution, its instruction's tokens, a state, noise."""
    from vla_server.policies.registry import detect

    raw = _config(folder)
    size = raw["vlm_config"]["vision_config"]["image_size"]
    generator = torch.Generator().manual_seed(seed)
    pixels = torch.rand((2, 3, size, size), generator=generator) * 2 - 1
    ids = detect(folder).tokenizer()(f"{INSTRUCTION}\n")["input_ids"]
    state = torch.zeros(raw["max_state_dim"])
    state[:4] = torch.rand(4, generator=generator)
    noise = torch.randn((1, raw["chunk_size"], raw["max_action_dim"]), generator=generator)
    return Observation(pixels, ids, state, noise)


def _config(folder: Path) -> dict[str, Any]:
    import json

    return json.loads((folder / "config.json").read_text())


class PhaseTimer:
    """Seconds per phase of one observation; `profiled`: the one phase run under
    `torch.profiler` (its result in `profile`); on a GPU each phase ends with a synchronize, so
    the host clock times the kernels, not their launches."""

    def __init__(self, profiled: str | None = None, device: str = "cpu"):
        self.seconds: dict[str, float] = {}
        self.profiled = profiled
        self.profile: Any = None
        self.cuda = torch.device(device).type == "cuda"

    def __call__(self, phase: str, fn: Callable[[], Any]) -> Any:
        if phase == self.profiled:
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CPU]) as self.profile:
                return fn()
        t0 = time.perf_counter()
        out = fn()
        if self.cuda:
            torch.cuda.synchronize()
        self.seconds[phase] = time.perf_counter() - t0
        return out


@dataclass
class Prefilled:
    row: int
    slots: torch.Tensor
    length: int


class NodePath:
    """The node's model runner on the folder, as it serves a lone robot: the prefix gathered
    from the pool once, the Euler steps back to back."""

    name = "node"

    def __init__(self, folder: Path, device: str = "cpu", dtype: torch.dtype = torch.float32):
        from vla_server.model.model_runner import ModelRunner
        from vla_server.policies.registry import detect

        self.runner = ModelRunner(
            detect(folder), device=device, dtype=dtype, max_total_tokens=8192, progress=False
        )
        self.steps = self.runner.parts.spec.num_inference_steps

    @torch.inference_mode()
    def sample(self, obs: Observation, timed: PhaseTimer) -> torch.Tensor:
        held = self.prefill(obs, timed)
        try:
            return timed("denoise", lambda: self._denoise(held.row, held.length, obs))
        finally:
            self.release(held)

    @torch.inference_mode()
    def prefill(self, obs: Observation, timed: PhaseTimer) -> Prefilled:
        """The observation's images and prompt into the pool, as the scheduler prefills them."""
        r = self.runner
        images = timed("vision", lambda: torch.cat(r.encode_images(list(obs.pixels.numpy()))))
        n = images.shape[0] + len(obs.text_ids)
        held = Prefilled(r.req_to_token_pool.alloc(), r.kv_pool.allocator.alloc(n), n)
        batch = r.build_forward_batch(
            [held.row], [0], [[0] * images.shape[0] + obs.text_ids], held.slots,
            input_embeds=images,
            input_embeds_mask=[True] * images.shape[0] + [False] * len(obs.text_ids),
            prefix_lm_lens=[n], position_shifts=[0],
        )  # fmt: skip
        timed("prefix", lambda: r.forward(batch, next_token_logits=False))
        return held

    def release(self, held: Prefilled) -> None:
        self.runner.req_to_token_pool.free(held.row)
        self.runner.kv_pool.allocator.free(held.slots)

    def _denoise(self, row: int, n: int, obs: Observation) -> torch.Tensor:
        r = self.runner
        prefix, x = r.paged_prefix([row], [n]), obs.noise.to(r.device)
        for t in denoise_times(self.steps):
            time_t = torch.tensor([t], device=r.device)
            x = euler_update(x, r.velocity(prefix, x, time_t, obs.state[None]), self.steps)
        return x[0].cpu()


class HfPath:
    """transformers' model on the folder, its phases as `sample_actions` runs them."""

    name = "transformers"

    def __init__(
        self, folder: Path, kind: str, device: str = "cpu", dtype: torch.dtype = torch.float32
    ):
        from vla_server.policies.pi_common.hf_reference import hf_policy

        self.model, self.kind = hf_policy(folder, kind, device, dtype), kind
        self.device = torch.device(device)
        self.steps = self.model.config.num_inference_steps

    @torch.no_grad()
    def sample(self, obs: Observation, timed: PhaseTimer) -> torch.Tensor:
        m, dev = self.model, self.device
        per_image = m.config.vlm_config.text_config.num_image_tokens
        image_id = m.config.vlm_config.image_token_id
        ids = torch.tensor([[image_id] * (per_image * len(obs.pixels)) + obs.text_ids], device=dev)
        cameras = torch.ones((1, len(obs.pixels)), dtype=torch.bool, device=dev)
        mask = torch.ones_like(ids)
        pixels = obs.pixels[None].to(dev, m.dtype)
        embeds = timed("vision", lambda: m.model.embed_prefix(ids, pixels, cameras))
        cache = timed("prefix", lambda: self._prefix(embeds, mask))
        return timed("denoise", lambda: self._denoise(cache, obs, cameras, mask))

    def _prefix(self, embeds: torch.Tensor, mask: torch.Tensor) -> Any:
        return self.model.model.vlm(
            inputs_embeds=embeds,
            attention_mask=mask,
            position_ids=mask.cumsum(-1) - 1,
            token_type_ids=torch.zeros_like(mask),
            use_cache=True,
        ).cache

    def _denoise(self, cache: Any, obs: Observation, cameras: torch.Tensor, mask: torch.Tensor):
        """`sample_actions`' step 3, verbatim in what it calls."""
        dev, dtype = self.device, self.model.dtype
        x, prefix_len, dt = obs.noise.to(dev, dtype), cache.get_seq_length(), -1.0 / self.steps
        state = {"state": obs.state[None].to(dev, dtype)} if self.kind == "pi0" else {}
        for step in range(self.steps):
            t = torch.full((1,), 1.0 + step * dt, dtype=torch.float32, device=dev)
            out = self.model(
                noise=x, timestep=t, pixel_attention_mask=cameras, attention_mask=mask,
                cache=cache, **state,
            )  # fmt: skip
            cache.crop(prefix_len - cache.get_seq_length())
            x = x + dt * out.logits
        return x[0].float().cpu()


ModelPath = NodePath | HfPath


def max_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(np.abs(a.numpy() - b.numpy()).max())
