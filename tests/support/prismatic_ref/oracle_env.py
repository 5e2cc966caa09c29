"""The isolated environment the OpenVLA oracle runs in, and the main environment's entry points.

``timm`` needs ``torchvision``, and the only ``torchvision`` wheels here are CUDA builds that
do not load next to the project's CPU torch (importing one in the main environment also breaks
``import transformers``). So ``timm`` and ``torchvision`` are installed without dependencies into
a cached folder of their own, and the oracle runs as a subprocess with that folder on its
``PYTHONPATH``. :func:`build_openvla_checkpoint` and :func:`reference_predict` are what tests
and benchmarks in the main environment call.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

from vla_server.model.checkpoint_cache import cached_folder

TIMM_VERSION = "1.0.29"
TORCHVISION_VERSION = "0.28.0"
ORACLE_FOLDER = f"timm-oracle-timm{TIMM_VERSION}-tv{TORCHVISION_VERSION}"
REPO_ROOT = Path(__file__).resolve().parents[3]
# torchvision's _meta_registrations.py registers fake kernels for these two ops at import; its
# C library (which would define them) does not load next to the CPU torch, so the schemas are
# defined first. timm never calls either op.
_TORCHVISION_OP_SCHEMAS = {
    "nms": "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}
BUILD_TIMEOUT_S = 1800.0
PREDICT_TIMEOUT_S = 1800.0


def _install(folder: Path) -> None:
    print(
        f"prismatic_ref: installing timm=={TIMM_VERSION} and torchvision=={TORCHVISION_VERSION} "
        f"(no dependencies) into {folder} ...",
        file=sys.stderr,
        flush=True,
    )
    subprocess.run(
        [
            sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target",
            str(folder), f"timm=={TIMM_VERSION}", f"torchvision=={TORCHVISION_VERSION}",
        ],
        check=True,
    )  # fmt: skip


def oracle_dir() -> Path:
    """The cached folder holding timm and torchvision, installed on first use."""
    return cached_folder(ORACLE_FOLDER, _install)


def _oracle_env() -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(oracle_dir()), str(REPO_ROOT)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def run_oracle(args: list[str], *, timeout: float) -> str:
    """Run ``python -m tests.support.prismatic_ref <args>`` in the oracle environment."""
    cmd = [sys.executable, "-m", "tests.support.prismatic_ref", *args]
    proc = subprocess.run(
        cmd, env=_oracle_env(), capture_output=True, text=True, timeout=timeout, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"prismatic_ref oracle {' '.join(args[:1])} failed (exit {proc.returncode}):\n"
            f"{proc.stderr.strip()}"
        )
    return proc.stdout


def import_timm() -> ModuleType:
    """Import timm inside the oracle process (never in the main environment)."""
    import torch

    for name, schema in _TORCHVISION_OP_SCHEMAS.items():
        try:
            getattr(torch.ops.torchvision, name)
        except (AttributeError, RuntimeError):
            torch.library.define(f"torchvision::{name}", schema)
    import timm

    return timm


def build_args(options: dict[str, Any]) -> list[str]:
    """The ``build`` command line for `options` (keys as the CLI's flags, ``_`` for ``-``)."""
    args = []
    for key, value in sorted(options.items()):
        flag = "--" + key.replace("_", "-")
        if value is True:
            args.append(flag)
        elif value is not False and value is not None:
            joined = ",".join(value) if isinstance(value, list | tuple) else str(value)
            args += [flag, joined]
    return args


def checkpoint_name(options: dict[str, Any]) -> str:
    """A cache folder name that changes with every option and with the builder's source."""
    source = b"".join(
        p.read_bytes()
        for p in sorted(Path(__file__).parent.glob("*.py"))
        if p.name != "oracle_env.py"
    )
    key = json.dumps(build_args(options)).encode() + hashlib.sha256(source).digest()
    return f"openvla-ref-{hashlib.sha256(key).hexdigest()[:16]}"


def build_openvla_checkpoint(out_dir: Path | None = None, **options: Any) -> Path:
    """Build an OpenVLA-layout folder; cached by `options` when `out_dir` is None.

    `options` are the ``build`` flags: backbone, towers, dtype, norm_keys, resize_strategy,
    sharded, arch_specifier, seed, vocab.
    """
    args = build_args(options)
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        run_oracle(["build", "--out", str(out_dir), *args], timeout=BUILD_TIMEOUT_S)
        return Path(out_dir)

    def build(folder: Path) -> None:
        run_oracle(["build", "--out", str(folder), *args], timeout=BUILD_TIMEOUT_S)

    return cached_folder(checkpoint_name(options), build)


def reference_predict(
    model_dir: Path, requests: list[dict[str, Any]], *, threads: int | None = None
) -> list[dict[str, Any]]:
    """OpenVLA's ``predict_action`` on each request, run by the oracle; one dict per request.
    `threads`: torch's CPU threads there (a timing comparison gives it the node's count)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(requests, f)
    try:
        args = ["predict", "--model", str(model_dir), "--requests", f.name]
        if threads:
            args += ["--threads", str(threads)]
        out = run_oracle(args, timeout=PREDICT_TIMEOUT_S)
    finally:
        os.unlink(f.name)
    return [json.loads(line) for line in out.splitlines() if line.strip()]
