"""Loads a pi0 / pi0.5 checkpoint's flow half (action expert, flow heads) into a `FlowModel`.

Names are openpi's (`flow_keys.py`), bare or under `model.`. The unused
`paligemma_with_expert.gemma_expert.lm_head.weight` is ignored; any other missing, unexpected
or misshapen flow tensor fails the load naming it, and so does a checkpoint whose tensors are
of the other kind than the policy's `type` (pi0 heads in a "pi05" folder, or the reverse).
As for the decoder, everything is checked from the file headers before a weight is copied.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from torch import nn

from vla_server.model.weight_loader import (
    LoadPlan,
    WeightLoadError,
    WeightSources,
    copy_planned,
    header_shapes,
    plan_weights,
    tensor_files,
)
from vla_server.policies.pi0.flow_keys import EXPERT_LM_HEAD, flow_kind, flow_name

_KIND_NAMES = {"pi0": "pi0", "pi05": "pi0.5"}


@dataclass(frozen=True)
class FlowWeights:
    """A checked plan: which checkpoint tensor goes where."""

    plan: LoadPlan
    files: dict[str, Path]


def plan_flow_weights(kind: str, sources: WeightSources, model_path: str | Path) -> FlowWeights:
    """Check the folder's flow tensors against a `kind` flow half whose parameters are
    `sources`, without changing anything."""
    files = tensor_files(model_path)
    try:
        found_kind = flow_kind(files)
    except ValueError as exc:
        raise WeightLoadError(f"{model_path}: {exc}") from exc
    if found_kind is None:
        raise WeightLoadError(f"{model_path}: no action expert or flow head tensors")
    if found_kind != kind:
        raise WeightLoadError(
            f"{model_path}: config.json says type {kind!r} ({_KIND_NAMES[kind]}), "
            f"but the weights are {_KIND_NAMES[found_kind]}'s"
        )
    found = header_shapes(files, flow_name)
    return FlowWeights(plan_weights(sources, found, ignored=(EXPERT_LM_HEAD,)), files)


def load_flow_weights(flow: nn.Module, weights: FlowWeights, *, progress: bool = True) -> None:
    copy_planned(flow, weights.plan, weights.files, progress=progress)


def is_flow_tensor(name: str) -> bool:
    """Whether the decoder loader leaves `name` to this one."""
    return flow_name(name) is not None
