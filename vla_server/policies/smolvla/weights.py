"""Loading a SmolVLA `model.safetensors` into `SmolVLA`, strictly.

LeRobot saves the policy's state dict, every key under `model.` (`VLAFlowMatching`); a bare
copy of the same keys is accepted too. Our parameter names map to the checkpoint's by prefix
(`RENAMES`); the checkpoint must hold exactly our tensors, with their shapes, plus optionally
the two it carries that inference never reads (`UNUSED`: the VLM's `lm_head` and final norm).
Any other difference raises `CheckpointMismatchError` naming the tensors. Weights of mixed
dtypes (LeRobot stores the VLM and expert in bfloat16, heads in float32) are cast on load: the
flow heads and `state_proj` to float32, everything else to the requested dtype.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import safe_open
from torch import nn

VLM = "vlm_with_expert.vlm.model."
EXPERT = "vlm_with_expert.lm_expert."
RENAMES = (
    ("prefix.vision.", VLM + "vision_model."),
    ("prefix.connector.proj.", VLM + "connector.modality_projection.proj."),
    ("prefix.embed_tokens.", VLM + "text_model.embed_tokens."),
    ("prefix.layers.", VLM + "text_model.layers."),
    ("prefix.state_proj.", "state_proj."),
    ("expert.", EXPERT),
    ("head.", ""),
)
UNUSED = ("vlm_with_expert.vlm.lm_head.weight", VLM + "text_model.norm.weight")
FLOAT32_PARTS = ("head.", "prefix.state_proj.")
LEROBOT_PREFIX = "model."


class CheckpointMismatchError(ValueError):
    """The checkpoint's tensors are not exactly the model's."""


def checkpoint_name(ours: str) -> str:
    """Our parameter name -> its bare checkpoint name."""
    for prefix, theirs in RENAMES:
        if ours.startswith(prefix):
            return theirs + ours[len(prefix) :]
    raise KeyError(ours)


def read_checkpoint(path: str | Path) -> dict[str, torch.Tensor]:
    """Every tensor of a safetensors file under its bare name (LeRobot's `model.` dropped)."""
    tensors: dict[str, torch.Tensor] = {}
    with safe_open(str(path), framework="pt") as f:
        for key in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
            bare = key.removeprefix(LEROBOT_PREFIX)
            if bare in tensors:
                raise CheckpointMismatchError(f"{path}: {bare!r} stored both bare and prefixed")
            tensors[bare] = f.get_tensor(key)
    return tensors


def check_tensors(
    tensors: dict[str, torch.Tensor], expected: dict[str, tuple[int, ...]], source: str
) -> None:
    """Raise naming every missing, foreign or misshapen tensor."""
    missing = sorted(set(expected) - set(tensors))
    foreign = sorted(set(tensors) - set(expected) - set(UNUSED))
    misshapen = sorted(
        f"{name} {list(tensors[name].shape)} (expected {list(shape)})"
        for name, shape in expected.items()
        if name in tensors and tuple(tensors[name].shape) != shape
    )
    problems = [
        f"{label}: {', '.join(names)}"
        for label, names in (("missing", missing), ("unexpected", foreign), ("shape", misshapen))
        if names
    ]
    if problems:
        raise CheckpointMismatchError(f"{source} does not match SmolVLA: " + "; ".join(problems))


def load_weights(
    model: nn.Module, folder: str | Path, *, dtype: torch.dtype, device: torch.device | str
) -> None:
    """Fill `model` (built on the meta device) from `folder/model.safetensors`."""
    path = Path(folder) / "model.safetensors"
    tensors = read_checkpoint(path)
    ours = {name: checkpoint_name(name) for name in model.state_dict()}
    expected = {ours[name]: tuple(t.shape) for name, t in model.state_dict().items()}
    check_tensors(tensors, expected, str(path))
    state = {
        name: tensors[theirs].to(device=device, dtype=_dtype_of(name, dtype))
        for name, theirs in ours.items()
    }
    model.load_state_dict(state, strict=True, assign=True)


def _dtype_of(name: str, dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if name.startswith(FLOAT32_PARTS) else dtype
