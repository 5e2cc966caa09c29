"""kernels/ installs as `vla_kernels`: it must not shadow the Hugging Face `kernels` hub that
transformers probes, must import without Triton or a GPU, and must say clearly why a launch on
CPU tensors cannot run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from transformers.utils.import_utils import is_kernels_available

KERNELS_DIR = Path(__file__).resolve().parents[2] / "kernels"

# Run isolated (-I: no cwd or PYTHONPATH on sys.path) from a folder outside the repository, i.e.
# with only what is installed in the environment.
PROBE = """
import importlib.util, json, os, sys
import torch
import vla_kernels, vla_kernels.decode_attention, vla_kernels.extend_attention
import vla_kernels.rmsnorm, vla_kernels.rotary
import vla_server.model.attention.triton_backend
triton_imported = "triton" in sys.modules
from vla_kernels.rmsnorm import rmsnorm

def launch_error():
    try:
        rmsnorm(torch.ones(1, 4), torch.ones(4), 1e-6)
    except RuntimeError as e:
        return str(e)

plain = launch_error()
from transformers.utils.import_utils import is_kernels_available  # imports triton.language
os.environ["TRITON_INTERPRET"] = "1"
spec = importlib.util.find_spec("kernels")
print(json.dumps({
    "triton_imported_by_our_modules": triton_imported,
    "launch_without_interpreter": plain,
    "launch_with_late_interpreter": launch_error(),
    "kernels_origin": spec and spec.origin,
    "vla_kernels_file": vla_kernels.__file__,
    "hub_available": is_kernels_available(),
}))
"""


def _probe(tmp_path: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    done = subprocess.run(
        [sys.executable, "-I", "-c", PROBE],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_transformers_kernel_hub_stays_unavailable_in_process():
    assert not is_kernels_available()


def test_installed_package_does_not_shadow_the_kernels_hub(tmp_path):
    found = _probe(tmp_path)
    assert Path(found["vla_kernels_file"]).parent == KERNELS_DIR
    origin = found["kernels_origin"]
    assert origin is None or not Path(origin).is_relative_to(KERNELS_DIR)
    assert found["hub_available"] is False
    assert found["triton_imported_by_our_modules"] is False
    assert "TRITON_INTERPRET=1" in found["launch_without_interpreter"]
    assert "set after triton.language" in found["launch_with_late_interpreter"]
