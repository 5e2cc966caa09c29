"""Which family a checkpoint folder belongs to: the one place a folder is classified.

`detect(folder)` reads the folder's `config.json` and asks each registered family, in order,
whether it reads that kind of config (`config_types`: LeRobot's `type`, Hugging Face's
`model_type`); a family may describe a conversion folder as the config it amounts to
(`describe_config`). The processes that did not detect the folder build the same family from
the readiness handshake's `ModelInfo` (`from_info`). Adding a family is one line in `FAMILIES`
(or `register` at run time, for a family that lives outside this package: name its module
with --policy-plugin and every process imports it before classifying the folder).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vla_server.io_struct import ModelInfo
from vla_server.model.tokenizer import load_tokenizer
from vla_server.policies.base import PolicyFamily
from vla_server.policies.llava.family import LlavaFamily
from vla_server.policies.openvla.family import OpenVLAFamily
from vla_server.policies.pi0.family import Pi0Family
from vla_server.policies.pi0fast.family import Pi0FastFamily
from vla_server.policies.smolvla.family import SmolVLAFamily

FAMILIES: list[type[PolicyFamily]] = [
    OpenVLAFamily, Pi0FastFamily, Pi0Family, SmolVLAFamily, LlavaFamily
]  # fmt: skip


class UnknownCheckpoint(ValueError):
    """No family reads this folder."""


def register(family: type[PolicyFamily]) -> None:
    """Add a family ahead of the built-in ones (a later registration wins a shared type)."""
    if family not in FAMILIES:
        FAMILIES.insert(0, family)


def unregister(family: type[PolicyFamily]) -> None:
    if family in FAMILIES:
        FAMILIES.remove(family)


def detect(folder: str | Path) -> PolicyFamily:
    """The family of the checkpoint in `folder`; UnknownCheckpoint names what was looked for."""
    path = Path(folder)
    raw = _read_config(path)
    for family in FAMILIES:
        config = family.describe_config(path, raw)
        kind = config.get("type") or config.get("model_type")
        if kind in family.config_types:
            return family(path, config)
    known = sorted({t for family in FAMILIES for t in family.config_types})
    raise UnknownCheckpoint(
        f"{path / 'config.json'}: no policy family reads type/model_type "
        f"{raw.get('type') or raw.get('model_type')!r} (known: {', '.join(known)})"
    )


def default_checkpoint() -> Path:
    """The embedded demo VLA the node serves when no --model-path is given (built offline)."""
    from vla_server.policies.llava.demo import demo_model_path

    return demo_model_path()


# The tiny checkpoint a denoising benchmark runs when none is named.
DEFAULT_DENOISING_TINY = "pi0"
# The tiny checkpoints LeRobot's async-inference client is run against (`bench lerobot-client`):
# policy types LeRobot 0.6.1's own policy_server serves, for an SO-100-like arm (two cameras, a
# 6-dim state and action; `demo_robots.py`).
LEROBOT_CLIENT_TINIES = ("pi0-so100", "pi05-so100")


def tiny_checkpoints() -> dict[str, Callable[[], Path]]:
    """Every registered family's tiny folders, by name."""
    return {name: build for f in FAMILIES for name, build in f.tiny_checkpoints().items()}


def tiny_checkpoint(name: str) -> Path:
    """The tiny folder called `name`, built on first use; ValueError names the known ones."""
    builders = tiny_checkpoints()
    if name not in builders:
        raise ValueError(f"no tiny checkpoint {name!r} (known: {', '.join(sorted(builders))})")
    return builders[name]()


def build_demo_checkpoint(out_dir: str | Path) -> Path:
    from vla_server.policies.llava.demo import make_demo_model

    return make_demo_model(out_dir)


def import_plugins(modules: tuple[str, ...]) -> None:
    """Import the modules that register families living outside this package."""
    for module in modules:
        importlib.import_module(module)


def checkpoint_tokenizer(family: PolicyFamily, tokenizer_path: str) -> Any:
    """The tokenizer every process uses: the family's own, unless --tokenizer-path names
    another folder."""
    if Path(tokenizer_path) == family.folder:
        return family.tokenizer()
    return load_tokenizer(tokenizer_path)


def from_info(info: ModelInfo) -> PolicyFamily:
    """The family the scheduler detected, built in another process from the handshake."""
    family = next((f for f in FAMILIES if f.name == info.family), None)
    if family is None:
        raise UnknownCheckpoint(
            f"the scheduler reports family {info.family!r}, not registered here"
        )
    path = Path(info.model_path)
    return family(path, family.describe_config(path, _read_config(path)))


def _read_config(path: Path) -> dict[str, Any]:
    config = path / "config.json"
    if not config.is_file():
        raise UnknownCheckpoint(f"{path} holds no config.json (a checkpoint folder needs one)")
    raw = json.loads(config.read_text())
    if not isinstance(raw, dict):
        raise UnknownCheckpoint(f"{config} is not a JSON object")
    return raw
