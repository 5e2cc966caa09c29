"""Random-weight checkpoints in OpenVLA's published Hugging Face layout (openvla/openvla-7b).

Runs inside the oracle process (the towers are ``timm`` models). A build is deterministic in
its options: the same files, byte for byte, from the same seed. Weights use a wide random init
(norm scales, biases and DINOv2's LayerScale too, which timm starts at 1e-5) so greedy outputs
depend on the image and the prompt, and the lm_head rows of the 256 action-bin ids are scaled
until OpenVLA's unconstrained argmax lands on action bins for a set of probe requests: the
node's bin-constrained decode and OpenVLA's unconstrained ``generate`` then pick the same ids.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import nn

from tests.support.prismatic_ref.llama_tokenizer import PAD_TOKEN, SPECIALS, save_llama_tokenizer
from tests.support.prismatic_ref.reference import (
    ACTION_PROMPT,
    SIDECAR,
    TOWER_PREFIXES,
    PrismaticReference,
    Projector,
    build_llm,
    create_tower,
    pixel_values,
    timm_to_published,
)

# vision_backbone_id -> (timm ids, act overrides, image sizes), as configuration_prismatic.py
BACKBONES: dict[str, tuple[tuple[str, ...], tuple[str | None, ...], tuple[int, ...]]] = {
    "dinosiglip-vit-so-224px": (
        ("vit_large_patch14_reg4_dinov2.lvd142m", "vit_so400m_patch14_siglip_224"),
        (None, None),
        (224, 224),
    ),
    "siglip-vit-so400m": (("vit_so400m_patch14_siglip_224",), (None,), (224,)),
    "clip-vit-l": (("vit_large_patch14_clip_224.openai",), ("quick_gelu",), (224,)),
    "dinov2-vit-l": (("vit_large_patch14_reg4_dinov2.lvd142m",), (None,), (224,)),
    "in1k-vit-l": (("vit_large_patch16_224.augreg_in21k_ft_in1k",), (None,), (224,)),
}
RESIZE_STRATEGIES = ("resize-naive", "letterbox", "resize-crop")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# A small Llama: the towers are what the real-size build is about.
LLM_SHAPE = {
    "hidden_size": 256,
    "intermediate_size": 688,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "max_position_embeddings": 2048,
    # openvla-7b's text_config leaves this out, so LlamaConfig's default (1e-6) is what it runs.
    "rms_norm_eps": 1e-6,
}
ACTION_DIM = 7
N_ACTION_BINS = 256
PAD_TO_MULTIPLE_OF = 64
LOGIT_GAIN = 4.0  # widens the lm_head so greedy picks have clear margins
ACTION_ROW_SCALES = (1.0, 2.0, 4.0, 8.0, 16.0)  # powers of two: exact in every dtype
PROBE_INSTRUCTIONS = ("pick up the red block", "open the top drawer")
AUTO_MAP = {
    "AutoConfig": "configuration_prismatic.OpenVLAConfig",
    "AutoModelForVision2Seq": "modeling_prismatic.OpenVLAForActionPrediction",
}
PROCESSOR_AUTO_MAP = {
    "AutoImageProcessor": "processing_prismatic.PrismaticImageProcessor",
    "AutoProcessor": "processing_prismatic.PrismaticProcessor",
}
_PIL_INTERPOLATION = {"bicubic": 3, "bilinear": 2}
# Sharper Llama attention (logit std ~ QK_GAIN**2): with flat attention the last position
# averages over the 256 patches and the image barely moves the greedy pick.
QK_GAIN = 3.0
_QK_NAMES = ("q_proj.weight", "k_proj.weight")
_TABLE_NAMES = ("pos_embed", "cls_token", "reg_token", "latent", "embed_tokens")
N_SHARDS = 3  # openvla-7b ships three shards


@dataclass(frozen=True)
class BuildOptions:
    backbone: str = "dinosiglip-vit-so-224px"
    towers: str = "tiny"  # "tiny" (3 blocks, narrow) or "full" (the timm ids' real sizes)
    dtype: str = "float32"
    norm_keys: tuple[str, ...] = ("bridge_orig",)
    resize_strategy: str = "resize-naive"
    sharded: bool = False
    arch_specifier: str | None = None  # default: fused-gelu-mlp when fused, else gelu-mlp
    seed: int = 0
    vocab: int = 1024  # base vocabulary (32000 in openvla-7b)

    @property
    def fused(self) -> bool:
        return len(BACKBONES[self.backbone][0]) == 2

    @property
    def arch(self) -> str:
        if self.arch_specifier is not None:
            return self.arch_specifier
        return "no-align+fused-gelu-mlp" if self.fused else "no-align+gelu-mlp"

    @property
    def padded_vocab(self) -> int:
        """len(tokenizer) (base + <PAD>) rounded up, as OpenVLA's resized embedding."""
        return math.ceil((self.vocab + 1) / PAD_TO_MULTIPLE_OF) * PAD_TO_MULTIPLE_OF

    def validate(self) -> None:
        if self.backbone not in BACKBONES:
            raise ValueError(f"backbone {self.backbone!r} is not one of {sorted(BACKBONES)}")
        if self.towers not in ("tiny", "full"):
            raise ValueError(f"towers must be tiny or full, not {self.towers!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype {self.dtype!r} is not one of {sorted(DTYPES)}")
        if self.resize_strategy not in RESIZE_STRATEGIES:
            raise ValueError(f"resize strategy {self.resize_strategy!r} not in {RESIZE_STRATEGIES}")
        if not self.norm_keys:
            raise ValueError("at least one norm_stats key is needed")


def tower_kwargs(timm_id: str, towers: str) -> dict[str, Any]:
    """timm model arguments: none for real size; a narrow 3-block tower for "tiny".

    The tiny towers keep the id's 16 heads, so head_dim is 8 (DINOv2/CLIP/ViT) or 9 (SigLIP).
    """
    if towers == "full":
        return {}
    return {"embed_dim": 144 if "siglip" in timm_id else 128, "depth": 3}


# ---- weights ----


@torch.no_grad()
def fill_wide(module: nn.Module, seed: int) -> None:
    """A wide random init from `seed`; every parameter, norms and biases included."""
    gen = torch.Generator().manual_seed(seed)
    for name, p in module.named_parameters():
        if any(t in name for t in _TABLE_NAMES):
            p.normal_(0.0, 1.0, generator=gen)
        elif p.dim() >= 2:
            gain = QK_GAIN if name.endswith(_QK_NAMES) else 1.0
            p.normal_(0.0, gain / math.sqrt(p[0].numel()), generator=gen)
        elif name.endswith("bias"):
            p.normal_(0.0, 0.2, generator=gen)
        else:  # norm scales and LayerScale gammas
            p.uniform_(0.5, 1.5, generator=gen)


@torch.no_grad()
def round_to(modules: list[nn.Module], dtype: torch.dtype) -> None:
    """Round float32 weights to the stored dtype, so probes see exactly what is saved."""
    for module in modules:
        for p in module.parameters():
            p.copy_(p.to(dtype).to(p.dtype))


def published_state(ref: PrismaticReference, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The state dict under OpenVLA's key names, in the stored dtype."""
    state = {}
    for prefix, tower in zip(TOWER_PREFIXES, ref.towers, strict=False):
        for name, value in tower.state_dict().items():
            state[prefix + timm_to_published(name)] = value
    state.update({f"projector.{k}": v for k, v in ref.projector.state_dict().items()})
    state.update({f"language_model.{k}": v for k, v in ref.llm.state_dict().items()})
    return {k: v.to(dtype).contiguous().clone() for k, v in state.items()}


def write_weights(out: Path, state: dict[str, torch.Tensor], sharded: bool) -> None:
    """`model.safetensors`, or shards in key order with `model.safetensors.index.json`."""
    from safetensors.torch import save_file

    if not sharded:
        save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
        return
    names = sorted(state)
    total = sum(state[n].numel() * state[n].element_size() for n in names)
    groups: list[list[str]] = [[]]
    size = 0
    for name in names:
        if size >= total / N_SHARDS * len(groups) and len(groups) < N_SHARDS:
            groups.append([])
        groups[-1].append(name)
        size += state[name].numel() * state[name].element_size()
    weight_map = {}
    for i, group in enumerate(groups):
        file = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        save_file({n: state[n] for n in group}, str(out / file), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(group, file))
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    write_json(out / "model.safetensors.index.json", index)


# ---- configs ----


def write_json(path: Path, obj: Any) -> None:
    # Hugging Face's own layout: sorted keys, two-space indent.
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def _bf16(values: Any) -> list[float]:
    """The bf16-rounded values OpenVLA's preprocessor_config.json carries."""
    return [float(v) for v in torch.tensor(list(values), dtype=torch.bfloat16).float()]


def norm_stats(keys: tuple[str, ...], seed: int) -> dict[str, Any]:
    """Per-dataset statistics shaped like openvla-7b's: 7-dim actions, gripper unmasked."""
    stats = {}
    for i, key in enumerate(keys):
        rng = np.random.default_rng([seed, i])
        spread = rng.uniform(0.01, 0.5, ACTION_DIM - 1)
        q01 = [*(-spread * rng.uniform(0.5, 1.0, ACTION_DIM - 1)), 0.0]
        q99 = [*(spread * rng.uniform(0.5, 1.0, ACTION_DIM - 1)), 1.0]
        low, high = np.array(q01), np.array(q99)
        action = {
            "mask": [True] * (ACTION_DIM - 1) + [False],
            "max": (high + np.abs(high) * 0.5).tolist(),
            "mean": ((low + high) / 2 + rng.normal(0.0, 0.01, ACTION_DIM)).tolist(),
            "min": (low - np.abs(low) * 0.5).tolist(),
            "q01": low.tolist(),
            "q99": high.tolist(),
            "std": ((high - low) / 4).tolist(),
        }
        proprio = {k: [0.0] * ACTION_DIM for k in ("max", "mean", "min", "q01", "q99", "std")}
        n_traj = int(rng.integers(100, 100_000))
        stats[key] = {
            "action": action,
            "num_trajectories": n_traj,
            "num_transitions": n_traj * int(rng.integers(20, 60)),
            "proprio": proprio,
        }
    return stats


def model_config(opts: BuildOptions, n_towers: int) -> dict[str, Any]:
    ids, acts, sizes = BACKBONES[opts.backbone]
    text_config = {
        "model_type": "llama",
        "vocab_size": opts.padded_vocab,
        **LLM_SHAPE,
        "pad_token_id": opts.vocab,
        "torch_dtype": opts.dtype,
    }
    return {
        "architectures": ["OpenVLAForActionPrediction"],
        "auto_map": AUTO_MAP,
        "model_type": "openvla",
        "vision_backbone_id": opts.backbone,
        "llm_backbone_id": "llama2-7b-pure",
        "hf_llm_id": "meta-llama/Llama-2-7b-hf",
        "arch_specifier": opts.arch,
        "use_fused_vision_backbone": n_towers == 2,
        "image_resize_strategy": opts.resize_strategy,
        "image_sizes": list(sizes),
        "timm_model_ids": list(ids),
        "timm_override_act_layers": list(acts),
        "llm_max_length": 2048,
        "pad_token_id": opts.vocab,
        "pad_to_multiple_of": PAD_TO_MULTIPLE_OF,
        "n_action_bins": N_ACTION_BINS,
        "norm_stats": norm_stats(opts.norm_keys, opts.seed),
        "output_projector_states": False,
        "text_config": text_config,
        "torch_dtype": opts.dtype,
        "transformers_version": "4.40.1",
    }


def preprocessor_config(opts: BuildOptions, towers: list[nn.Module]) -> dict[str, Any]:
    """PrismaticImageProcessor's saved state; means/stds from each tower's timm data config."""
    sizes = BACKBONES[opts.backbone][2]
    means = [_bf16(t.pretrained_cfg["mean"]) for t in towers]
    stds = [_bf16(t.pretrained_cfg["std"]) for t in towers]
    interps = [t.pretrained_cfg.get("interpolation", "bicubic") for t in towers]
    naive, letterbox = opts.resize_strategy == "resize-naive", opts.resize_strategy == "letterbox"
    return {
        "auto_map": PROCESSOR_AUTO_MAP,
        "image_processor_type": "PrismaticImageProcessor",
        "processor_class": "PrismaticProcessor",
        "image_resize_strategy": opts.resize_strategy,
        "input_sizes": [[3, s, s] for s in sizes],
        "interpolations": interps,
        "means": means,
        "stds": stds,
        "tvf_crop_params": [{"output_size": [s, s]} for s in sizes],
        "tvf_do_letterbox": letterbox,
        # The original sets the fill inside its per-backbone loop: the last backbone's wins.
        "tvf_letterbox_fill": [int(x * 255) for x in means[-1]] if letterbox else None,
        "tvf_normalize_params": [
            {"inplace": False, "mean": m, "std": s} for m, s in zip(means, stds, strict=True)
        ],
        "tvf_resize_params": [
            {
                "antialias": True,
                "interpolation": _PIL_INTERPOLATION[interp],
                "max_size": None,
                "size": [s, s] if naive else s,
            }
            for s, interp in zip(sizes, interps, strict=True)
        ],
        "use_fused_vision_backbone": len(towers) == 2,
    }


def write_tokenizer(out: Path, n_base: int) -> None:
    """The tokenizer, plus the two small files the original Llama folder also carries."""
    save_llama_tokenizer(out, n_base)
    unk, bos, eos = SPECIALS
    tokens = {"bos_token": bos, "eos_token": eos, "pad_token": PAD_TOKEN, "unk_token": unk}
    write_json(out / "special_tokens_map.json", tokens)
    write_json(out / "added_tokens.json", {PAD_TOKEN: n_base})


# ---- probes and the build ----


def probe_images(seed: int) -> list[Image.Image]:
    """Three deterministic frames of different sizes and aspect ratios."""
    rng = np.random.default_rng([seed, 1234])
    images = []
    for w, h in ((256, 256), (320, 240), (180, 300)):
        ramp = np.linspace(0, 255, w)[None, :, None] * rng.uniform(0.2, 1.0, (1, 1, 3))
        noise = rng.integers(0, 256, (h, w, 3))
        images.append(Image.fromarray(((ramp + noise) / 2).astype(np.uint8), "RGB"))
    return images


@torch.no_grad()
def choose_action_scale(ref: PrismaticReference, n_base: int, seed: int) -> dict[str, Any]:
    """Scale the action-bin rows of lm_head until every probe's greedy tokens are action bins
    and the probes' action tokens all differ; returns what was chosen and seen."""
    head = ref.llm.get_output_embeddings().weight
    rows = slice(n_base - N_ACTION_BINS, n_base)
    base = head[rows].clone()
    patches = [ref.encode(pixel_values(img, ref.preprocessor)[None]) for img in probe_images(seed)]
    prompts = [ref.prompt_ids(ACTION_PROMPT.format(instruction=i)) for i in PROBE_INSTRUCTIONS]
    seen = []
    for scale in ACTION_ROW_SCALES:
        head[rows] = base * scale
        runs = [ref.generate(ids, p, ACTION_DIM) for p in patches for ids in prompts]
        tokens = [tuple(t) for t, _ in runs]
        in_bins = all(rows.start <= t < rows.stop for seq in tokens for t in seq)
        seen.append({"scale": scale, "in_bins": in_bins, "distinct": len(set(tokens))})
        if in_bins and len(set(tokens)) == len(tokens):
            margins = [float(torch.topk(lg, 2).values.diff().abs()) for _, s in runs for lg in s]
            return {
                "action_row_scale": scale,
                "probe_tokens": [list(t) for t in tokens],
                "min_top2_logit_margin": min(margins),
                "tried": seen,
            }
    raise RuntimeError(f"no action-row scale puts every probe on distinct action bins: {seen}")


def build_checkpoint(out: Path, opts: BuildOptions) -> Path:
    """Write an OpenVLA-layout folder for `opts` into `out` (created if missing)."""
    from transformers import AutoTokenizer

    opts.validate()
    out.mkdir(parents=True, exist_ok=True)
    ids, acts, sizes = BACKBONES[opts.backbone]
    kwargs = [tower_kwargs(i, opts.towers) for i in ids]
    print(f"prismatic_ref: building {opts} in {out}", file=sys.stderr, flush=True)
    towers = [create_tower(*spec) for spec in zip(ids, sizes, acts, kwargs, strict=True)]
    vision_dim = sum(t.embed_dim for t in towers)
    projector = Projector(opts.arch, vision_dim, LLM_SHAPE["hidden_size"])
    config = model_config(opts, len(towers))
    llm = build_llm(config["text_config"])
    for i, module in enumerate((*towers, projector, llm)):
        fill_wide(module, opts.seed * 1000 + i)
        module.eval()
    with torch.no_grad():
        llm.get_output_embeddings().weight.mul_(LOGIT_GAIN)
    round_to([*towers, projector, llm], DTYPES[opts.dtype])
    write_tokenizer(out, opts.vocab)
    tokenizer = AutoTokenizer.from_pretrained(str(out), trust_remote_code=False)
    if len(tokenizer) != opts.vocab + 1 or tokenizer.pad_token_id != opts.vocab:
        raise RuntimeError(f"tokenizer has {len(tokenizer)} ids, pad {tokenizer.pad_token_id}")
    pre = preprocessor_config(opts, towers)
    ref = PrismaticReference(config, pre, towers, projector, llm, tokenizer)
    report = choose_action_scale(ref, opts.vocab, opts.seed)
    print(f"prismatic_ref: {report}", file=sys.stderr, flush=True)
    write_weights(out, published_state(ref, DTYPES[opts.dtype]), opts.sharded)
    write_json(out / "config.json", config)
    write_json(out / "preprocessor_config.json", pre)
    write_json(out / "dataset_statistics.json", config["norm_stats"])
    gen = {"_from_model_config": True, "bos_token_id": 1, "eos_token_id": 2}
    write_json(
        out / "generation_config.json",
        {**gen, "pad_token_id": opts.vocab, "transformers_version": "4.40.1"},
    )
    # Test-only sidecars: the node never reads them.
    write_json(out / SIDECAR, kwargs)
    write_json(out / "reference_build_report.json", report)
    return out
