"""Test-only OpenVLA reference: ``modeling_prismatic.py`` and ``processing_prismatic.py`` semantics.

Runs inside the oracle process (it needs ``timm``). The towers are ``timm`` models built as
``PrismaticVisionBackbone`` builds them, their features the patch tokens of the second-to-last
block; the projector follows the ``arch_specifier``; the language model is transformers'
``LlamaForCausalLM``. Images are preprocessed with PIL as ``PrismaticImageProcessor`` does with
torchvision's PIL path, and actions come from an unconstrained greedy decode de-tokenized
exactly as ``predict_action`` does.
"""

from __future__ import annotations

import base64
import io
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import nn

from tests.support.prismatic_ref.oracle_env import import_timm

ACTION_PROMPT = "In: What action should the robot take to {instruction}?\nOut:"
# Prismatic stores LayerScale's parameter as `scale_factor`; timm names it `gamma`.
_LS_SUFFIXES = (("ls1.scale_factor", "ls1.gamma"), ("ls2.scale_factor", "ls2.gamma"))
TOWER_PREFIXES = ("vision_backbone.featurizer.", "vision_backbone.fused_featurizer.")
SIDECAR = "reference_tower_kwargs.json"


def create_tower(timm_id: str, size: int, act: str | None, kwargs: dict[str, Any]) -> nn.Module:
    """One vision tower, created with the arguments PrismaticVisionBackbone passes."""
    timm = import_timm()
    return timm.create_model(
        timm_id, pretrained=False, num_classes=0, img_size=size, act_layer=act, **kwargs
    )


def tower_features(tower: nn.Module, pixels: torch.Tensor) -> torch.Tensor:
    """Patch tokens of the second-to-last block (Prismatic's featurizer forward)."""
    return tower.get_intermediate_layers(pixels, n={len(tower.blocks) - 2})[0]


def timm_to_published(name: str) -> str:
    for stored, timm_name in _LS_SUFFIXES:
        if name.endswith(timm_name):
            return name[: -len(timm_name)] + stored
    return name


def published_to_timm(name: str) -> str:
    for stored, timm_name in _LS_SUFFIXES:
        if name.endswith(stored):
            return name[: -len(stored)] + timm_name
    return name


class Projector(nn.Module):
    """Prismatic's projectors, with the HF port's parameter names (fc1, fc2, fc3)."""

    def __init__(self, arch_specifier: str, vision_dim: int, llm_dim: int) -> None:
        super().__init__()
        kind = arch_specifier.split("+")[-1]
        if kind == "fused-gelu-mlp":
            dims = [vision_dim, 4 * vision_dim, llm_dim, llm_dim]
        elif kind == "gelu-mlp":
            dims = [vision_dim, llm_dim, llm_dim]
        elif kind == "linear":
            dims = [vision_dim, llm_dim]
        else:
            raise ValueError(f"unsupported arch_specifier {arch_specifier!r}")
        for i in range(len(dims) - 1):
            setattr(self, f"fc{i + 1}", nn.Linear(dims[i], dims[i + 1], bias=True))
        self.n_layers = len(dims) - 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i in range(1, self.n_layers + 1):
            x = getattr(self, f"fc{i}")(x)
            if i < self.n_layers:
                x = nn.functional.gelu(x)
        return x


def build_llm(text_config: dict[str, Any]) -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    kwargs = {k: v for k, v in text_config.items() if k not in ("model_type", "torch_dtype")}
    # Eager attention: plain matmul-softmax, the same on every host.
    return LlamaForCausalLM(LlamaConfig(**kwargs, attn_implementation="eager"))


# ---- image preprocessing (PrismaticImageProcessor.apply_transform on a PIL image) ----


def letterbox_pad(img: Image.Image, fill: tuple[int, ...]) -> Image.Image:
    """`letterbox_pad_transform`: equal padding on both sides, truncated to ints as the original
    does (so an odd difference leaves the image one pixel short of square)."""
    (w, h), max_wh = img.size, max(img.size)
    pad_w, pad_h = int((max_wh - w) / 2), int((max_wh - h) / 2)
    out = Image.new(img.mode, (w + 2 * pad_w, h + 2 * pad_h), tuple(fill))
    out.paste(img, (pad_w, pad_h))
    return out


def resize(img: Image.Image, size: int | list[int], interpolation: int) -> Image.Image:
    """torchvision's `resize` on PIL: an int resizes the shorter side, keeping the aspect."""
    w, h = img.size
    if isinstance(size, int):
        short, long = (w, h) if w <= h else (h, w)
        new_short, new_long = size, int(size * long / short)
        out_w, out_h = (new_short, new_long) if w <= h else (new_long, new_short)
    else:
        out_h, out_w = size
    if (out_w, out_h) == (w, h):
        return img
    return img.resize((out_w, out_h), Image.Resampling(interpolation))


def center_crop(img: Image.Image, size: list[int]) -> Image.Image:
    crop_h, crop_w = size
    w, h = img.size
    if crop_w > w or crop_h > h:
        raise ValueError(f"center crop {size} is larger than the resized image {img.size}")
    top, left = int(round((h - crop_h) / 2.0)), int(round((w - crop_w) / 2.0))
    return img.crop((left, top, left + crop_w, top + crop_h))


def to_normalized(img: Image.Image, mean: list[float], std: list[float]) -> torch.Tensor:
    """`to_tensor` then `normalize`: float32 in [0, 1], then (x - mean) / std per channel."""
    x = torch.from_numpy(np.asarray(img, dtype=np.uint8).copy()).permute(2, 0, 1)
    x = x.to(torch.float32).div(255)
    mean_t = torch.as_tensor(mean, dtype=torch.float32).view(-1, 1, 1)
    std_t = torch.as_tensor(std, dtype=torch.float32).view(-1, 1, 1)
    return (x - mean_t) / std_t


def pixel_values(img: Image.Image, pre: dict[str, Any]) -> torch.Tensor:
    """The processor's (3 * towers, H, W) input for one image."""
    img = img.convert("RGB")
    if pre["tvf_do_letterbox"]:
        img = letterbox_pad(img, tuple(pre["tvf_letterbox_fill"]))
    per_tower = []
    for resize_p, crop_p, norm_p in zip(
        pre["tvf_resize_params"], pre["tvf_crop_params"], pre["tvf_normalize_params"], strict=True
    ):
        size = resize_p["size"]
        out = resize(img, size if isinstance(size, int) else list(size), resize_p["interpolation"])
        out = center_crop(out, list(crop_p["output_size"]))
        per_tower.append(to_normalized(out, norm_p["mean"], norm_p["std"]))
    return torch.cat(per_tower, dim=0)


def load_image(request: dict[str, Any]) -> Image.Image:
    if "image_png_b64" in request:
        return Image.open(io.BytesIO(base64.b64decode(request["image_png_b64"])))
    return Image.open(request["image_path"])


def request_prompt(request: dict[str, Any]) -> str:
    if request.get("prompt") is not None:
        return request["prompt"]
    return ACTION_PROMPT.format(instruction=request["instruction"].lower())


# ---- the model ----


@dataclass
class PrismaticReference:
    """An OpenVLA model: towers, projector and Llama, with the folder's config and processor."""

    config: dict[str, Any]
    preprocessor: dict[str, Any]
    towers: list[nn.Module]
    projector: Projector
    llm: nn.Module
    tokenizer: Any

    @property
    def space_id(self) -> int:
        """The id of the lone "▁" piece, which predict_action appends (29871 in Llama-2)."""
        return self.tokenizer.convert_tokens_to_ids("▁")

    @property
    def dtype(self) -> torch.dtype:
        return next(self.llm.parameters()).dtype

    @torch.no_grad()
    def encode(self, pixels: torch.Tensor) -> torch.Tensor:
        """(B, 3 * towers, H, W) -> projected patch embeddings (B, patches, llm_dim)."""
        pixels = pixels.to(self.dtype)
        chunks = torch.split(pixels, [3] * len(self.towers), dim=1)
        feats = [tower_features(t, c) for t, c in zip(self.towers, chunks, strict=True)]
        return self.projector(torch.cat(feats, dim=2))

    @torch.no_grad()
    def generate(
        self, input_ids: list[int], patches: torch.Tensor, n_tokens: int
    ) -> tuple[list[int], list[torch.Tensor]]:
        """Unconstrained greedy decode of `n_tokens`, as HF `generate(do_sample=False)` would.

        The patches go right after BOS; returns the tokens and each step's logits.
        """
        from transformers.cache_utils import DynamicCache

        ids = torch.tensor([input_ids])
        embed = self.llm.get_input_embeddings()
        text = embed(ids)
        inputs = torch.cat([text[:, :1], patches.to(text.dtype), text[:, 1:]], dim=1)
        cache = DynamicCache()
        out = self.llm(inputs_embeds=inputs, cache=cache, use_cache=True)
        tokens, logits = [], []
        for step in range(n_tokens):
            step_logits = out.logits[0, -1].float()
            token = int(torch.argmax(step_logits))
            tokens.append(token)
            logits.append(step_logits)
            if step + 1 < n_tokens:
                out = self.llm(input_ids=torch.tensor([[token]]), cache=cache)
        return tokens, logits

    def prompt_ids(self, prompt: str) -> list[int]:
        """The tokenizer's ids (with BOS), plus "▁" when missing, as predict_action does."""
        ids = list(self.tokenizer(prompt).input_ids)
        if ids[-1] != self.space_id:
            ids.append(self.space_id)
        return ids

    def norm_key(self, unnorm_key: str | None) -> str:
        stats = self.config["norm_stats"]
        if unnorm_key is None:
            if len(stats) != 1:
                raise ValueError(f"unnorm_key is required: the model has {sorted(stats)}")
            return next(iter(stats))
        if unnorm_key not in stats:
            raise ValueError(f"unnorm_key {unnorm_key!r} is not one of {sorted(stats)}")
        return unnorm_key

    def action_dim(self, unnorm_key: str | None) -> int:
        return len(self.config["norm_stats"][self.norm_key(unnorm_key)]["action"]["q01"])

    def decode_actions(self, token_ids: list[int], unnorm_key: str | None) -> list[float]:
        """predict_action's de-tokenization, in numpy float64 as the original."""
        cfg = self.config
        vocab_size = cfg["text_config"]["vocab_size"] - cfg["pad_to_multiple_of"]
        bins = np.linspace(-1, 1, cfg["n_action_bins"])
        centers = (bins[:-1] + bins[1:]) / 2.0
        discretized = vocab_size - np.asarray(token_ids)
        discretized = np.clip(discretized - 1, a_min=0, a_max=centers.shape[0] - 1)
        normalized = centers[discretized]
        stats = cfg["norm_stats"][self.norm_key(unnorm_key)]["action"]
        mask = stats.get("mask", np.ones_like(stats["q01"], dtype=bool))
        high, low = np.array(stats["q99"]), np.array(stats["q01"])
        actions = np.where(mask, 0.5 * (normalized + 1) * (high - low) + low, normalized)
        return [float(a) for a in actions]

    def predict(self, request: dict[str, Any]) -> dict[str, Any]:
        """One request -> tokens, actions, prompt ids and timings (perf_counter, ms)."""
        start = time.perf_counter()
        key = request.get("unnorm_key")
        n_tokens = self.action_dim(key)
        pixels = pixel_values(load_image(request), self.preprocessor).unsqueeze(0)
        ids = self.prompt_ids(request_prompt(request))
        enc_start = time.perf_counter()
        patches = self.encode(pixels)
        enc_end = time.perf_counter()
        tokens, _ = self.generate(ids, patches, n_tokens)
        first_action = time.perf_counter()
        actions = self.decode_actions(tokens, key)
        end = time.perf_counter()
        return {
            "token_ids": tokens,
            "actions": actions,
            "input_ids": ids,
            "encode_ms": (enc_end - enc_start) * 1e3,
            "first_action_ms": (first_action - start) * 1e3,
            "total_ms": (end - start) * 1e3,
        }


# ---- loading a folder ----


def read_state_dict(model_dir: Path) -> dict[str, torch.Tensor]:
    """The weights of `model.safetensors` or of every shard named by the index."""
    from safetensors.torch import load_file

    index = model_dir / "model.safetensors.index.json"
    if not index.exists():
        return load_file(str(model_dir / "model.safetensors"))
    state: dict[str, torch.Tensor] = {}
    for shard in sorted(set(json.loads(index.read_text())["weight_map"].values())):
        state.update(load_file(str(model_dir / shard)))
    return state


def _take(state: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}


def build_towers(config: dict[str, Any], tower_kwargs: list[dict[str, Any]]) -> list[nn.Module]:
    n = 2 if config["use_fused_vision_backbone"] else 1
    return [
        create_tower(
            config["timm_model_ids"][i],
            config["image_sizes"][i],
            config["timm_override_act_layers"][i],
            tower_kwargs[i],
        )
        for i in range(n)
    ]


def load_reference(model_dir: Path, dtype: torch.dtype = torch.float32) -> PrismaticReference:
    """The reference model of an OpenVLA-layout folder, computing in `dtype`."""
    from transformers import AutoTokenizer

    model_dir = Path(model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    pre = json.loads((model_dir / "preprocessor_config.json").read_text())
    towers = build_towers(config, json.loads((model_dir / SIDECAR).read_text()))
    projector = Projector(
        config["arch_specifier"],
        sum(t.embed_dim for t in towers),
        config["text_config"]["hidden_size"],
    )
    llm = build_llm(config["text_config"])
    state = read_state_dict(model_dir)
    known = (*TOWER_PREFIXES[: len(towers)], "projector.", "language_model.")
    stray = sorted(k for k in state if not k.startswith(known))
    if stray:
        raise ValueError(f"{model_dir}: weights outside the OpenVLA layout: {stray[:5]}")
    for tower, prefix in zip(towers, TOWER_PREFIXES, strict=False):
        part = {published_to_timm(k): v for k, v in _take(state, prefix).items()}
        tower.load_state_dict(part, strict=True)
    projector.load_state_dict(_take(state, "projector."), strict=True)
    llm.load_state_dict(_take(state, "language_model."), strict=True)
    for module in (*towers, projector, llm):
        module.to(dtype).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir), trust_remote_code=False)
    return PrismaticReference(config, pre, towers, projector, llm, tokenizer)
