"""Where a pi0 / pi0.5 chunk's time goes, in-process on the node's own ModelRunner: the vision
tower over the cameras, the prefix forward (images + prompt into the paged KV, once per
request) and the `num_inference_steps` denoising passes of the action expert over it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vla_harness.stats import summary_ms
from vla_server.model.denoise import denoise_times, euler_update, initial_noise
from vla_server.model.model_runner import ModelRunner
from vla_server.policies.pi0.family import Pi0Family
from vla_server.policies.pi0.prompt import flow_prompt_text
from vla_server.policies.registry import detect

INSTRUCTION = "pick up the red block and put it in the bowl"


def chunk_phases(path: str | Path, reps: int, warmup: int = 2) -> dict[str, Any]:
    """ms per phase of one chunk (P50/P99 over `reps`), and each phase's share of the P50s."""
    family = detect(path)
    if not isinstance(family, Pi0Family):
        raise SystemExit(f"{path} is not a pi0 / pi0.5 checkpoint")
    runner = ModelRunner(family, max_running_requests=1, progress=False)
    policy = family.policy()
    spec = policy.spec
    text_in = flow_prompt_text(policy, INSTRUCTION, [0.0] * spec.state_dim, family.layout)
    ids = family.tokenizer()(text_in)
    text = list(ids["input_ids"])
    h, w = spec.image_resolution
    rng = np.random.default_rng(0)
    pixels = [rng.uniform(-1, 1, (3, h, w)).astype(np.float32) for _ in spec.cameras]
    state = torch.zeros((1, spec.max_state_dim)) if not policy.state_in_prompt else None
    phases: dict[str, list[float]] = {"vision": [], "prefix": [], "denoise": []}
    for rep in range(reps + warmup):
        times = _one_chunk(runner, pixels, text, state, spec.num_inference_steps)
        if rep >= warmup:
            for name, t in zip(phases, times, strict=True):
                phases[name].append(t)
    out = {name: summary_ms(v) for name, v in phases.items()}
    total = sum(s["p50"] for s in out.values())
    assert runner.vision is not None
    return {
        "prompt_tokens": runner.vision.num_image_tokens * len(pixels) + len(text),
        "num_inference_steps": spec.num_inference_steps,
        "phases_ms": out,
        "share_p50": {name: s["p50"] / total for name, s in out.items()},
    }


def _one_chunk(
    runner: ModelRunner,
    pixels: list[np.ndarray],
    text: list[int],
    state: torch.Tensor | None,
    steps: int,
) -> tuple[float, float, float]:
    t0 = time.perf_counter()
    features = torch.cat(runner.encode_images(pixels))
    t1 = time.perf_counter()
    n_img = features.shape[0]
    ids = [0] * n_img + text
    row = runner.req_to_token_pool.alloc()
    slots = runner.kv_pool.allocator.alloc(len(ids))
    assert row is not None and slots is not None
    mask = [True] * n_img + [False] * len(text)
    batch = runner.build_forward_batch(
        [row], [0], [ids], slots, input_embeds=features, input_embeds_mask=mask,
        prefix_lm_lens=[len(ids)],
    )  # fmt: skip
    runner.forward(batch, next_token_logits=False)  # as served: nothing samples
    t2 = time.perf_counter()
    head = runner.head
    assert head is not None
    x = initial_noise(0, head.chunk_size, head.width).to(runner.device)
    for t in denoise_times(steps):
        at = torch.full((1,), t, dtype=torch.float32, device=runner.device)
        x = euler_update(x, runner.denoise([row], [len(ids)], x, at, state), steps)
    t3 = time.perf_counter()
    runner.kv_pool.allocator.free(slots)
    runner.req_to_token_pool.free(row)
    return t1 - t0, t2 - t1, t3 - t2
