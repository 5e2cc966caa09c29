"""Run inside LeRobot 0.6.1's own venv (never imported by vla_server): load a SmolVLA folder
with LeRobot's `SmolVLAPolicy` and its saved pre/post processors, and write the chunk of every
case in a cases file, from the case's own noise.

    python lerobot_script.py FOLDER CASES.safetensors CASES.json OUT.safetensors OUT.json

CASES.json lists, per case, its camera keys and instruction; CASES.safetensors holds
`<i>.<camera key>` images [3, H, W] float in [0, 1], `<i>.state` [state_dim] and `<i>.noise`
[1, chunk, max_action_dim]. OUT.safetensors gets `<i>.actions` (postprocessed, [chunk,
action_dim]) and `<i>.normalized` (`predict_action_chunk`, before the postprocessor).

The only adaptation to a tiny offline folder: the process runs in FOLDER, so that the relative
`vlm_model_name` "vlm" (SmolVLM2 config, processor and tokenizer) resolves there. Loading is
strict: any missing or unexpected tensor fails the run instead of LeRobot's warning.
"""

from __future__ import annotations

import json
import os
import sys
from importlib.metadata import version
from pathlib import Path

import torch
from lerobot.policies.factory import make_pre_post_processors
from lerobot.policies.smolvla.modeling_smolvla import SmolVLAPolicy
from lerobot.processor import PolicyProcessorPipeline
from safetensors import safe_open
from safetensors.torch import load_file, save_file


def load(folder: Path) -> tuple[SmolVLAPolicy, PolicyProcessorPipeline, PolicyProcessorPipeline]:
    os.chdir(folder)
    policy = SmolVLAPolicy.from_pretrained(str(folder), strict=True).float().eval()
    # LeRobot's own factory path: the saved processors with their batch/action converters.
    pre, post = make_pre_post_processors(policy.config, pretrained_path=str(folder))
    return policy, pre, post


def key_report(policy: SmolVLAPolicy, folder: Path) -> dict[str, list[str]]:
    """The file's tensors against the policy's state dict, both ways (strict loading already
    raised on a difference; this records it)."""
    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        stored = set(f.keys())
    ours = set(policy.state_dict())
    return {"missing": sorted(ours - stored), "unexpected": sorted(stored - ours)}


def run_case(policy, pre, post, tensors: dict, i: int, case: dict) -> dict[str, torch.Tensor]:
    batch = {key: tensors[f"{i}.{key}"] for key in case["cameras"]}
    batch["observation.state"] = tensors[f"{i}.state"]
    batch["task"] = case["task"]
    policy.reset()
    processed = pre(batch)
    normalized = policy.predict_action_chunk(processed, noise=tensors[f"{i}.noise"].clone())
    actions = post(normalized)
    return {f"{i}.normalized": normalized[0].contiguous(), f"{i}.actions": actions[0].contiguous()}


def main(argv: list[str]) -> None:
    folder, cases_st, cases_json, out_st, out_json = (Path(a).resolve() for a in argv)
    torch.manual_seed(0)
    policy, pre, post = load(folder)
    tensors = load_file(str(cases_st))
    cases = json.loads(cases_json.read_text())
    out: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for i, case in enumerate(cases):
            out.update(run_case(policy, pre, post, tensors, i, case))
            print(f"lerobot: case {i + 1}/{len(cases)} done", flush=True)
    save_file(out, str(out_st))
    report = {
        "lerobot": version("lerobot"),
        "torch": torch.__version__,
        "transformers": version("transformers"),
        "keys": key_report(policy, folder),
        "num_tensors": len(policy.state_dict()),
    }
    out_json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
