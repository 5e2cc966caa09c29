"""Prefilling a PaliGemma-backbone prompt (images first, then text) into a runner's pool, as
the scheduler does, for the pi-family model tests."""

from __future__ import annotations

import torch

from vla_server.model.model_runner import ModelRunner


def prefill(runner: ModelRunner, pixels: torch.Tensor, text_ids: list[int], prefix: int,
            shift: int = 0) -> tuple[int, torch.Tensor, torch.Tensor]:  # fmt: skip
    """(request row, slots, logits) after prefilling images + text, the first `prefix` tokens
    bidirectional."""
    images = torch.cat(runner.encode_images(list(pixels.numpy())))
    n_img = images.shape[0]
    ids = [0] * n_img + text_ids
    row = runner.req_to_token_pool.alloc()
    slots = runner.kv_pool.allocator.alloc(len(ids))
    batch = runner.build_forward_batch(
        [row], [0], [ids], slots, input_embeds=images,
        input_embeds_mask=[True] * n_img + [False] * len(text_ids),
        prefix_lm_lens=[prefix], position_shifts=[shift],
    )  # fmt: skip
    return row, slots, runner.forward(batch).next_token_logits[0]
