"""kernels/vla_kernels installs as `vla_kernels`: nothing in the repository is importable as
`kernels`, so it never shadows the Hugging Face `kernels` hub that transformers probes (installed
or not, and from the repository root too); it imports without Triton or a GPU and says clearly
why a launch on CPU tensors cannot run."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

from transformers.utils.import_utils import is_kernels_available

ROOT = Path(__file__).resolve().parents[3]
KERNELS_DIR = ROOT / "kernels"

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


def _hub_installed() -> bool:
    spec = importlib.util.find_spec("kernels")
    return spec is not None and not Path(str(spec.origin)).is_relative_to(KERNELS_DIR)


def test_transformers_sees_the_kernels_hub_only_when_it_is_installed():
    assert is_kernels_available() == _hub_installed()


def test_installed_package_does_not_shadow_the_kernels_hub(tmp_path):
    found = _probe(tmp_path)
    assert Path(found["vla_kernels_file"]).parent == KERNELS_DIR / "vla_kernels"
    origin = found["kernels_origin"]
    assert origin is None or not Path(origin).is_relative_to(KERNELS_DIR)
    assert found["hub_available"] == _hub_installed()
    assert found["triton_imported_by_our_modules"] is False
    assert "TRITON_INTERPRET=1" in found["launch_without_interpreter"]
    assert "set after triton.language" in found["launch_with_late_interpreter"]


STAND_IN = "HUB_STAND_IN = True\nclass CUDAProperties:\n    pass\n"


def test_from_the_root_a_kernels_distribution_is_not_shadowed(tmp_path):
    """The README's commands run from the repository root, where sys.path[0] is the root: with
    a `kernels` distribution installed (a stand-in in a temporary site dir), `import kernels`
    and transformers' `kernels.CUDAProperties` find it, not the repository's folder."""
    site = tmp_path / "site"
    (site / "kernels").mkdir(parents=True)
    (site / "kernels" / "__init__.py").write_text(STAND_IN)
    (site / "kernels-0.0.1.dist-info").mkdir()
    (site / "kernels-0.0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: kernels\nVersion: 0.0.1\n"
    )
    env = {**os.environ, "PYTHONPATH": str(site), "CUDA_VISIBLE_DEVICES": ""}
    probe = "import kernels; from kernels import CUDAProperties; print(kernels.__file__)"
    found = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert found.returncode == 0, found.stderr
    assert Path(found.stdout.strip()).is_relative_to(site)
    demo = subprocess.run(
        [sys.executable, "-m", "vla_server.policies.llava.demo", "--help"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert demo.returncode == 0, demo.stderr
