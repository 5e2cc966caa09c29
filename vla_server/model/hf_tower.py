"""transformers' naming of a vision-language model's vision half (LLaVA-style and prefix-LM
checkpoints alike): the tower under `vision_tower.`, the projector under
`multi_modal_projector.`, each optionally under `model.`; and the tower settings that decide
its output."""

from __future__ import annotations

from vla_server.model.weight_loader import WeightLoadError

_TOWER_PREFIXES = ("model.vision_tower.", "vision_tower.")
_PROJECTOR_PREFIXES = ("model.multi_modal_projector.", "multi_modal_projector.")
VISION_PREFIXES = _TOWER_PREFIXES + _PROJECTOR_PREFIXES

# Every vision_config key the tower's math depends on; the rest (ids, dtype, output flags) is
# ignored, so two checkpoints with equal settings run the same function.
TOWER_KEYS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_channels",
    "image_size",
    "patch_size",
    "hidden_act",
    "layer_norm_eps",
)


def module_name(name: str) -> str:
    """`model.vision_tower.X`, `vision_tower.X` or `vision_tower.vision_model.X` -> `tower.X`;
    `[model.]multi_modal_projector.X` -> `projector.X`."""
    for prefix in _TOWER_PREFIXES:
        if name.startswith(prefix):
            return "tower." + name[len(prefix) :].removeprefix("vision_model.")
    for prefix in _PROJECTOR_PREFIXES:
        if name.startswith(prefix):
            return "projector." + name[len(prefix) :]
    raise WeightLoadError(f"unexpected vision tensor {name!r}")
