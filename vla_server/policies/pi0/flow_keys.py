"""The names of a pi0 / pi0.5 checkpoint's flow-matching tensors, and which of the two it is.

openpi's `PI0Pytorch` module tree, saved bare (base repositories, openpi's conversion) or under
`model.` (LeRobot fine-tunes), holds besides the PaliGemma backbone:

* the action expert, `paligemma_with_expert.gemma_expert.model.{layers.N.*, norm.*}`, and an
  unused `paligemma_with_expert.gemma_expert.lm_head.weight` (the expert's embedding is None);
* pi0's heads `state_proj`, `action_in_proj`, `action_out_proj`, `action_time_mlp_in`,
  `action_time_mlp_out`;
* pi0.5's heads `action_in_proj`, `action_out_proj`, `time_mlp_in`, `time_mlp_out`, and
  adaRMS expert norms (`...layernorm.dense.{weight,bias}`, `...model.norm.dense.*`).

Only the heads and norms that one kind has and the other lacks decide the kind.
"""

from __future__ import annotations

from collections.abc import Iterable

FLOW_TYPES = ("pi0", "pi05")
EXPERT_PREFIX = "paligemma_with_expert.gemma_expert."
EXPERT_LM_HEAD = EXPERT_PREFIX + "lm_head.weight"
HEADS: dict[str, tuple[str, ...]] = {
    "pi0": ("state_proj", "action_in_proj", "action_out_proj", "action_time_mlp_in",
            "action_time_mlp_out"),
    "pi05": ("action_in_proj", "action_out_proj", "time_mlp_in", "time_mlp_out"),
}  # fmt: skip
_ALL_HEADS = frozenset(HEADS["pi0"] + HEADS["pi05"])
_ONLY = {kind: frozenset(HEADS[kind]) - frozenset(HEADS[other]) for kind, other in
         (("pi0", "pi05"), ("pi05", "pi0"))}  # fmt: skip
ADA_NORM = ".dense."


def flow_name(name: str) -> str | None:
    """A checkpoint name without its `model.` prefix when it belongs to the flow half (the
    expert or a head); None for anything else."""
    short = name.removeprefix("model.")
    if short.startswith(EXPERT_PREFIX) or short.split(".", 1)[0] in _ALL_HEADS:
        return short
    return None


def flow_kind(names: Iterable[str]) -> str | None:
    """ "pi0" or "pi05" from a checkpoint's tensor names; None when it has no flow tensors.
    A ValueError names the tensors when both kinds' own tensors are present."""
    evidence: dict[str, list[str]] = {"pi0": [], "pi05": []}
    for name in names:
        short = flow_name(name)
        if short is None:
            continue
        head = short.split(".", 1)[0]
        for kind in FLOW_TYPES:
            if head in _ONLY[kind]:
                evidence[kind].append(name)
        if short.startswith(EXPERT_PREFIX) and ADA_NORM in short:
            evidence["pi05"].append(name)
    if evidence["pi0"] and evidence["pi05"]:
        raise ValueError(
            f"the weights mix pi0 tensors ({evidence['pi0'][0]}) and pi0.5 tensors "
            f"({evidence['pi05'][0]})"
        )
    return next((kind for kind in FLOW_TYPES if evidence[kind]), None)
