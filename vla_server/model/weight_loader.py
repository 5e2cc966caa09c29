"""Loads decoder weights from a local folder of `*.safetensors` into a model's fused parameters.

Checkpoint names are first brought to the plain Llama layout (`model.layers.N...`,
`model.embed_tokens`, `model.norm`, `lm_head`), whatever the source:

* Llama / Qwen2:                 `model.X`, `lm_head.X`
* LLaVA, transformers 5 layout:  `model.language_model.X`, `lm_head.X`
* LLaVA, older layout:           `language_model.model.X`, `language_model.lm_head.X`
* Idefics3 / SmolVLM:            `model.text_model.X`, `lm_head.X`
* a policy that wraps its decoder:  any of the above under an outer prefix its family strips
                                   (`DecoderLayout.strip`); a tied embedding may be saved only as
                                   `lm_head.weight`

Tensors under the layout's `skip` prefixes (vision tower, projector, action head) are left to
their own loaders (`load_tensors_with_prefix`). Everything is validated from the safetensors
headers (names and shapes) before a single weight is copied, so a bad checkpoint leaves the
model's current weights untouched. Tensors are then streamed one at a time into the parameters.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from torch import nn
from tqdm import tqdm

_LAYOUT_PREFIXES = (
    ("model.language_model.", "model."),
    ("model.text_model.", "model."),
    ("language_model.model.", "model."),
    ("language_model.lm_head.", "lm_head."),
    ("model.", "model."),
    ("lm_head.", "lm_head."),
)
# Buffers some older checkpoints saved; they are recomputed, never loaded.
_IGNORED_SUFFIXES = (".rotary_emb.inv_freq",)
_MAX_LISTED = 8


@dataclass(frozen=True)
class DecoderLayout:
    """Where a folder's decoder tensors are: `strip` prefixes are removed before the names are
    read in the plain Llama layout; tensors under `skip` belong to other loaders (a vision
    tower, a projector)."""

    strip: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()


# checkpoint tensor name -> [(parameter name, first row, shape)]
LoadPlan = dict[str, list[tuple[str, int, tuple[int, ...]]]]
# our parameter name -> [(canonical checkpoint name, shape), ...] concatenated along dim 0
WeightSources = dict[str, list[tuple[str, tuple[int, ...]]]]
# canonical name -> (checkpoint name, shape)
FoundShapes = dict[str, tuple[str, tuple[int, ...]]]


class WeightLoadError(ValueError):
    """The checkpoint does not fit the model: missing, unexpected or misshapen tensors."""


def tensor_files(model_path: str | Path) -> dict[str, Path]:
    """Tensor name -> the safetensors file holding it (sharded index, single file, or all model
    files)."""
    path = Path(model_path)
    index = path / "model.safetensors.index.json"
    if index.exists():
        weight_map = json.loads(index.read_text())["weight_map"]
        return {name: path / file for name, file in weight_map.items()}
    # LeRobot folders also hold their processors' statistics as `policy_*.safetensors`.
    files = sorted(f for f in path.glob("*.safetensors") if not f.name.startswith("policy_"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors files in {path}")
    names: dict[str, Path] = {}
    for file in files:
        with safe_open(str(file), framework="pt") as f:
            names.update(dict.fromkeys(f.keys(), file))
    return names


def unprefixed(name: str, strip: tuple[str, ...]) -> str:
    """A checkpoint name without the first of the outer prefixes `strip` it carries."""
    for prefix in strip:
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def decoder_name(name: str, layout: DecoderLayout) -> str | None:
    """The plain-Llama name of a decoder tensor; None for tensors that belong to something else."""
    name = unprefixed(name, layout.strip)
    if name.startswith(layout.skip) or name.endswith(_IGNORED_SUFFIXES):
        return None
    for prefix, canonical in _LAYOUT_PREFIXES:
        if name.startswith(prefix):
            return canonical + name[len(prefix) :]
    raise WeightLoadError(f"unexpected tensor {name!r}: not part of a Llama-family checkpoint")


def load_decoder_weights(
    model: nn.Module,
    model_path: str | Path,
    layout: DecoderLayout,
    *,
    progress: bool = True,
    skip: Callable[[str], bool] | None = None,
) -> None:
    """Validate the checkpoint against `model.weight_sources()`, then copy it in. Tensors for
    which `skip(name)` holds belong to another loader (an action head)."""
    files = tensor_files(model_path)
    if skip is not None:
        files = {name: file for name, file in files.items() if not skip(name)}
    found = header_shapes(files, lambda name: decoder_name(name, layout))
    plan = _load_plan(model.weight_sources(), found)
    copy_planned(model, plan, files, progress=progress)


def copy_planned(
    model: nn.Module, plan: LoadPlan, files: dict[str, Path], *, progress: bool = True
) -> None:
    """Copy each planned checkpoint tensor into its parameter rows, streaming file by file."""
    params = dict(model.named_parameters())
    by_file: dict[Path, list[str]] = defaultdict(list)
    for name in plan:
        by_file[files[name]].append(name)
    bar = tqdm(total=len(plan), desc="Loading weights", unit="tensor", disable=not progress)
    with bar, torch.no_grad():
        for file, names in by_file.items():
            bar.set_postfix_str(file.name)
            with safe_open(str(file), framework="pt") as f:
                for name in names:
                    tensor = f.get_tensor(name)
                    for param, row, shape in plan[name]:
                        params[param].data[row : row + shape[0]].copy_(tensor)
                    bar.update()


def load_tensors_with_prefix(
    model_path: str | Path,
    prefixes: Iterable[str],
    *,
    strip: tuple[str, ...] = (),
    device: str | torch.device = "cpu",
) -> dict[str, torch.Tensor]:
    """Every tensor whose name (without an outer prefix of `strip`) starts with one of
    `prefixes`, under that name."""
    out: dict[str, torch.Tensor] = {}
    for file, names in _names_by_file(model_path, prefixes, strip).items():
        with safe_open(str(file), framework="pt", device=str(device)) as f:
            out.update({short: f.get_tensor(name) for name, short in names})
    return out


def tensor_shapes(
    model_path: str | Path, prefixes: Iterable[str], strip: tuple[str, ...] = ()
) -> dict[str, tuple[int, ...]]:
    """Shape of every tensor `load_tensors_with_prefix` would load, from the file headers."""
    shapes: dict[str, tuple[int, ...]] = {}
    for file, names in _names_by_file(model_path, prefixes, strip).items():
        with safe_open(str(file), framework="pt") as f:
            shapes.update({short: tuple(f.get_slice(name).get_shape()) for name, short in names})
    return shapes


def _names_by_file(
    model_path: str | Path, prefixes: Iterable[str], strip: tuple[str, ...]
) -> dict[Path, list[tuple[str, str]]]:
    """file -> [(checkpoint name, name without an outer prefix)] of the names `prefixes`
    select."""
    prefixes = tuple(prefixes)
    by_file: dict[Path, list[tuple[str, str]]] = defaultdict(list)
    for name, file in tensor_files(model_path).items():
        short = unprefixed(name, strip)
        if short.startswith(prefixes):
            by_file[file].append((name, short))
    return by_file


def check_names_and_shapes(
    expected: dict[str, tuple[int, ...]], found: dict[str, tuple[int, ...]], what: str
) -> None:
    """Raise a WeightLoadError listing what `found` (name -> shape) lacks, adds or misshapes."""
    misshapen = [
        f"{n}: checkpoint {list(found[n])}, model {list(shape)}"
        for n, shape in expected.items()
        if n in found and tuple(found[n]) != tuple(shape)
    ]
    _raise_if_any(
        f"checkpoint does not match the {what}",
        missing=[n for n in expected if n not in found],
        unexpected=[n for n in found if n not in expected],
        misshapen=misshapen,
    )


def check_module_tensors(module: nn.Module, tensors: dict[str, torch.Tensor], what: str) -> None:
    """`check_names_and_shapes` of `tensors` (named as `module`'s own) against `module`."""
    expected = {name: tuple(t.shape) for name, t in module.state_dict().items()}
    found = {name: tuple(t.shape) for name, t in tensors.items()}
    check_names_and_shapes(expected, found, what)


def header_shapes(
    files: dict[str, Path], rename: Callable[[str], str | None]
) -> dict[str, tuple[str, tuple[int, ...]]]:
    """`rename(name)` -> (checkpoint name, shape) of every tensor `rename` keeps (not None),
    read from the file headers only."""
    by_file: dict[Path, list[str]] = defaultdict(list)
    for name, file in files.items():
        by_file[file].append(name)
    shapes: dict[str, tuple[str, tuple[int, ...]]] = {}
    for file, names in by_file.items():
        with safe_open(str(file), framework="pt") as f:
            for name in names:
                canonical = rename(name)
                if canonical is not None:
                    shapes[canonical] = (name, tuple(f.get_slice(name).get_shape()))
    return shapes


def _load_plan(sources: WeightSources, found: FoundShapes) -> LoadPlan:
    embed, head = "model.embed_tokens.weight", "lm_head.weight"
    if head not in found and embed in found:
        found = {**found, head: found[embed]}  # tied
    needed = {canonical for parts in sources.values() for canonical, _shape in parts}
    if embed not in found and head in found and head not in needed:
        # Tied, saved once under the head's name (as LeRobot saves its policies' backbones; it
        # copies lm_head into embed_tokens on load).
        found = {**found, embed: found[head]}
    # A tied model ignores a saved lm_head, as the reference implementation does.
    return plan_weights(sources, found, ignored=(head,))


def plan_weights(
    sources: WeightSources, found: FoundShapes, ignored: Iterable[str] = ()
) -> LoadPlan:
    """Which checkpoint tensor fills which parameter rows, for a module whose parameters are
    `sources` (parameter -> [(canonical name, shape)], concatenated along dim 0) and a
    checkpoint of `found` tensors (canonical name -> (checkpoint name, shape)). A
    WeightLoadError names every missing, unexpected (other than `ignored`) or misshapen one."""
    needed: dict[str, list[tuple[str, int, tuple[int, ...]]]] = defaultdict(list)
    for param, parts in sources.items():
        row = 0
        for canonical, shape in parts:
            needed[canonical].append((param, row, shape))
            row += shape[0]
    ignored = set(ignored)
    misshapen = [
        f"{found[c][0]}: checkpoint {list(found[c][1])}, model {list(targets[0][2])}"
        for c, targets in needed.items()
        if c in found and found[c][1] != targets[0][2]
    ]
    _raise_if_any(
        "checkpoint does not match the model",
        missing=[c for c in needed if c not in found],
        unexpected=[found[c][0] for c in found if c not in needed and c not in ignored],
        misshapen=misshapen,
    )
    plan: LoadPlan = defaultdict(list)
    for canonical, targets in needed.items():
        plan[found[canonical][0]].extend(targets)
    return dict(plan)


def _raise_if_any(headline: str, **problems: list[str]) -> None:
    lines = []
    for kind, names in problems.items():
        if names:
            shown = ", ".join(names[:_MAX_LISTED])
            more = f" (+{len(names) - _MAX_LISTED} more)" if len(names) > _MAX_LISTED else ""
            lines.append(f"{len(names)} {kind} tensor(s): {shown}{more}")
    if lines:
        raise WeightLoadError(f"{headline}: " + "; ".join(lines))
