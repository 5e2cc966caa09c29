"""Raw observations -> `PrefixInputs`, and the model's actions -> the robot's, as LeRobot's
SmolVLA pre/post-processors and `SmolVLAPolicy.prepare_*` do.

Pre: rename cameras (`rename_map`); the instruction gets a trailing "\\n" if it has none and
is tokenized with the SmolVLM2 tokenizer (no BOS; `max_length` `tokenizer_max_length`,
truncation, right padding to `pad_language_to`: "max_length" or "longest"), the mask as
bool; the state normalized (`observation.state` statistics) and zero padded to
`max_state_dim`; images as `images.py`. Post: the first `action_dim` columns of the chunk,
unnormalized with the `action` statistics.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import AutoTokenizer

from vla_server.policies.smolvla.config import ACTION_KEY, STATE_KEY, SmolVLAConfig
from vla_server.policies.smolvla.images import prepare_images
from vla_server.policies.smolvla.prefix import PrefixInputs
from vla_server.policies.smolvla.processor_files import (
    ProcessorFiles,
    TokenizerSettings,
    read_processor_files,
)


@dataclass
class Observation:
    """One batch of raw observations (LeRobot's batch before its preprocessor)."""

    images: Mapping[str, torch.Tensor]  # camera key -> [B, 3, H, W], float [0, 1] or uint8
    state: torch.Tensor  # [B, state_dim], unnormalized
    task: Sequence[str]  # one instruction per row
    image_masks: Mapping[str, torch.Tensor] | None = None  # camera key -> [B] bool


def load_tokenizer(config: SmolVLAConfig):
    return AutoTokenizer.from_pretrained(config.vlm_folder)


def image_special_ids(config: SmolVLAConfig, tokenizer) -> tuple[list[int], list[int]]:
    """The token ids LeRobot puts around each image when `add_image_special_tokens`."""
    if not config.add_image_special_tokens:
        return [], []
    fake, glob = tokenizer.convert_tokens_to_ids(["<fake_token_around_image>", "<global-img>"])
    return [fake, glob], [fake]


class SmolVLAProcessor:
    def __init__(self, config: SmolVLAConfig, tokenizer, files: ProcessorFiles):
        self.config = config
        self.tokenizer = tokenizer
        self.files = files
        self.text = files.tokenizer or TokenizerSettings(
            max_length=config.tokenizer_max_length, padding=config.pad_language_to
        )

    @classmethod
    def from_folder(cls, config: SmolVLAConfig) -> SmolVLAProcessor:
        return cls(config, load_tokenizer(config), read_processor_files(config.folder))

    def __call__(self, obs: Observation, device: torch.device | str = "cpu") -> PrefixInputs:
        c = self.config
        rename = self.files.rename_map
        images = {rename.get(k, k): v.to(device) for k, v in obs.images.items()}
        masks = None
        if obs.image_masks is not None:
            masks = {rename.get(k, k): v.to(device) for k, v in obs.image_masks.items()}
        pixels, pixel_masks = prepare_images(
            images, c.camera_keys, c.empty_cameras, c.resize_with_padding, masks
        )
        tokens, token_mask = self.tokenize(obs.task)
        state = self.state(obs.state.to(device))
        return PrefixInputs(pixels, pixel_masks, tokens.to(device), token_mask.to(device), state)

    def tokenize(self, tasks: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Instructions -> (ids [B, T] int64, mask [B, T] bool)."""
        if self.files.newline:
            tasks = [t if t.endswith("\n") else t + "\n" for t in tasks]
        s = self.text
        out = self.tokenizer(
            list(tasks),
            max_length=s.max_length,
            truncation=s.truncation,
            padding=s.padding,
            padding_side=s.padding_side,
            return_tensors="pt",
        )
        return out["input_ids"].to(torch.long), out["attention_mask"].to(torch.bool)

    def state(self, state: torch.Tensor) -> torch.Tensor:
        """Raw state [B, state_dim] -> normalized, zero padded [B, max_state_dim] float32."""
        state = state.to(torch.float32)
        if self.files.normalizer is not None:
            state = self.files.normalizer(STATE_KEY, state)
        return F.pad(state, (0, max(0, self.config.max_state_dim - state.shape[-1])))

    def actions(self, chunk: torch.Tensor) -> torch.Tensor:
        """The model's chunk [B, H, max_action_dim] -> the robot's [B, H, action_dim]."""
        chunk = chunk[..., : self.config.action_dim]
        if self.files.unnormalizer is not None:
            chunk = self.files.unnormalizer(ACTION_KEY, chunk, inverse=True)
        return chunk
