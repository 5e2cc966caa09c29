"""A broken OpenVLA folder stops `vla-server serve` at start-up: exit 1, and one line that names
the problem (the missing tensor, the wrong timm id, both vocabulary sizes), no traceback."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from tests.support.prismatic_ref.oracle_env import build_openvla_checkpoint
from tests.support.server import run_server

TINY = {"backbone": "dinosiglip-vit-so-224px", "towers": "tiny", "norm_keys": "bridge_orig"}
MISSING = "vision_backbone.fused_featurizer.blocks.1.attn.qkv.weight"


def broken_copy(tmp_path: Path, drop: str | None = None, **config: object) -> Path:
    folder = tmp_path / "broken"
    shutil.copytree(build_openvla_checkpoint(**TINY), folder)
    if drop is not None:
        weights = load_file(folder / "model.safetensors")
        del weights[drop]
        save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    raw = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(raw | config))
    return folder


def start_up_error(folder: Path, tmp_path: Path) -> str:
    with pytest.raises(RuntimeError, match="server exited with 1"), run_server(folder, tmp_path):
        pass
    log = next(tmp_path.glob("server-*.log")).read_text()
    assert "Traceback" not in log, log
    errors = [line for line in log.splitlines() if line.startswith("vla-server: error:")]
    assert len(errors) == 1, log
    return errors[0]


def test_missing_tower_weight(tmp_path):
    line = start_up_error(broken_copy(tmp_path, drop=MISSING), tmp_path)
    assert "1 missing tensor(s): " + MISSING in line


def test_wrong_timm_model_ids(tmp_path):
    # SigLIP's weights read as a DINOv2-with-registers tower: its tokens and LayerScales are
    # missing (an unknown id fails earlier, in PrismaticSpec: test_prismatic_config.py)
    ids = ["vit_large_patch14_reg4_dinov2.lvd142m"] * 2
    line = start_up_error(broken_copy(tmp_path, timm_model_ids=ids), tmp_path)
    assert "vision_backbone.fused_featurizer.reg_token" in line and "timm_model_ids" in line


def test_padded_vocabulary_the_tokenizer_does_not_match(tmp_path):
    # 1088 embedding rows - 32 = 1056 declared ids, but the tokenizer has 1024
    line = start_up_error(broken_copy(tmp_path, pad_to_multiple_of=32), tmp_path)
    assert "= 1056 ids" in line and "has 1024" in line
