"""Cross-check `SmolVLA` against LeRobot 0.6.1's own `SmolVLAPolicy` on tiny random folders.

For each folder spec (`FOLDERS`) a tiny checkpoint is built (`tiny.py`); LeRobot loads it
strictly, runs its saved preprocessor, `predict_action_chunk` from the case's seeded noise
(`vla_server.model.denoise.initial_noise`) and its postprocessor
(`lerobot_script.py`, in LeRobot's venv, `lerobot_env.py`); our `SmolVLAPolicy` runs
the same raw observations and noise. The largest differences, LeRobot's chunks (so that tests
can compare against them without LeRobot) and each folder's model hash go to a JSON file.
Run from a checkout, the test-only reference (`tests/support/smolvla_reference.py`, looked up
at run time: the package does not depend on the tests) is compared to LeRobot too.

    python -m vla_server.policies.smolvla.lerobot_crosscheck [--out FILE]   # default: DEFAULT_OUT
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import tempfile
from dataclasses import asdict, dataclass
from importlib.metadata import version
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from vla_harness.lerobot_env import ensure_lerobot_venv, run_script
from vla_server.model.denoise import initial_noise
from vla_server.policies.smolvla.policy import SmolVLAPolicy
from vla_server.policies.smolvla.processor import Observation
from vla_server.policies.smolvla.tiny import CAMERAS, STATE_DIM, TinySpec, build_tiny_smolvla

SCRIPT = Path(__file__).with_name("lerobot_script.py")
DEFAULT_OUT = Path("docs/results/smolvla-lerobot-crosscheck.json")
# Camera 1 is letterboxed (48 x 64 -> 24 rows of padding on top), camera 2 upscaled (40 x 30).
IMAGE_SHAPES = {CAMERAS[0]: (48, 64), CAMERAS[1]: (40, 30)}
TASKS = (
    "pick up the red block",
    "open the top drawer and put the sponge inside then close it again carefully\n",
)
FOLDERS = (
    TinySpec(seed=0),
    TinySpec(seed=1, empty_cameras=1),
    TinySpec(seed=2, empty_cameras=1, add_image_special_tokens=True, mixed_dtypes=True),
)
CAMERA_SETS = ((CAMERAS[0], CAMERAS[1]), (CAMERAS[0],), (CAMERAS[1],))


@dataclass(frozen=True)
class Case:
    folder: int  # index into FOLDERS
    cameras: tuple[str, ...]
    task: str
    seed: int  # images, state and noise


def cases() -> list[Case]:
    """12 cases: every camera set x both instructions on the plain folder, two camera sets x
    both instructions with an empty camera slot, both cameras and one with image tokens."""
    out = [Case(0, cams, task, 0) for cams in CAMERA_SETS for task in TASKS]
    out += [Case(1, cams, task, 0) for cams in CAMERA_SETS[:2] for task in TASKS]
    out += [Case(2, cams, TASKS[0], 0) for cams in CAMERA_SETS[:2]]
    return [Case(c.folder, c.cameras, c.task, 100 + i) for i, c in enumerate(out)]


def case_inputs(
    case: Case, chunk: int, width: int
) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
    """(camera -> [3, H, W] float [0, 1], state [STATE_DIM], noise [1, chunk, width])."""
    g = torch.Generator().manual_seed(case.seed)
    images = {cam: torch.rand((3, *IMAGE_SHAPES[cam]), generator=g) for cam in case.cameras}
    state = 2.0 * torch.randn(STATE_DIM, generator=g)
    return images, state, initial_noise(case.seed, chunk, width)


def ours(policy: SmolVLAPolicy, case: Case) -> tuple[torch.Tensor, torch.Tensor]:
    """Our (normalized, unnormalized) chunk [H, action_dim] for a case."""
    c = policy.model.config
    images, state, noise = case_inputs(case, c.chunk_size, c.max_action_dim)
    obs = Observation({k: v[None] for k, v in images.items()}, state[None], [case.task])
    inputs = policy.processor(obs)
    normalized = policy.model.sample_actions(inputs, noise)
    actions = policy.processor.actions(normalized)[0]
    return normalized[0, :, : c.action_dim], actions


def run_lerobot(python: Path, folder: Path, group: list[Case], work: Path) -> tuple[dict, dict]:
    """LeRobot's outputs for the cases of one folder, and its key report."""
    chunk, width = json.loads((folder / "config.json").read_text())["chunk_size"], 32
    tensors: dict[str, torch.Tensor] = {}
    for i, case in enumerate(group):
        images, state, noise = case_inputs(case, chunk, width)
        tensors.update({f"{i}.{k}": v for k, v in images.items()})
        tensors[f"{i}.state"], tensors[f"{i}.noise"] = state, noise
    save_file(tensors, work / "cases.safetensors")
    listing = [{"cameras": list(c.cameras), "task": c.task} for c in group]
    (work / "cases.json").write_text(json.dumps(listing))
    files = [work / n for n in ("cases.safetensors", "cases.json", "out.safetensors", "out.json")]
    run_script(python, SCRIPT, [folder, *files])
    return load_file(str(files[2])), json.loads(files[3].read_text())


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def crosscheck(python: Path, work: Path) -> dict:
    all_cases = cases()
    folders, results = [], []
    for index, spec in enumerate(FOLDERS):
        folder = build_tiny_smolvla(work / f"tiny-{index}", spec)
        group = [c for c in all_cases if c.folder == index]
        theirs, report = run_lerobot(python, folder, group, work)
        hashes = {
            "model_sha256": sha256(folder / "model.safetensors"),
            "tokenizer_sha256": sha256(folder / "vlm" / "tokenizer.json"),
        }
        folders.append({"spec": asdict(spec), **hashes, **report})
        policy, reference = SmolVLAPolicy.from_folder(folder), _test_reference(folder)
        for i, case in enumerate(group):
            normalized, actions = ours(policy, case)
            results.append(_case_result(case, normalized, actions, theirs, i))
            if reference is not None:
                diff = (reference(case) - theirs[f"{i}.actions"]).abs().max()
                results[-1]["reference_max_abs_diff_actions"] = float(diff)
            print(f"ours vs lerobot: {results[-1]['max_abs_diff_actions']:.3g} ({case})")
    return _summary(folders, results)


def _test_reference(folder: Path):
    """Case -> the test reference's actions [H, action_dim], or None outside a checkout."""
    try:
        ref = importlib.import_module("tests.support.smolvla_reference")
    except ImportError:
        return None
    loaded = ref.load_reference(folder)

    def run(case: Case) -> torch.Tensor:
        images, state, noise = case_inputs(case, loaded.cfg["chunk_size"], 32)
        batch = {k: v[None] for k, v in images.items()}
        return ref.sample(loaded, batch, state[None], [case.task], noise)[1][0]

    return run


def _case_result(case: Case, normalized, actions, theirs: dict, i: int) -> dict:
    lerobot_norm, lerobot_actions = theirs[f"{i}.normalized"], theirs[f"{i}.actions"]
    return {
        **asdict(case),
        "max_abs_diff_normalized": float((normalized - lerobot_norm).abs().max()),
        "max_abs_diff_actions": float((actions - lerobot_actions).abs().max()),
        "lerobot_actions": lerobot_actions.tolist(),
    }


def _summary(folders: list[dict], results: list[dict]) -> dict:
    return {
        "what": "SmolVLA (vla_server.policies.smolvla, float32, CPU) vs LeRobot 0.6.1 "
        "SmolVLAPolicy.float() with its saved pre/post processors, same raw inputs and noise",
        "ours": {"torch": torch.__version__, "transformers": version("transformers")},
        "max_abs_diff_normalized": max(r["max_abs_diff_normalized"] for r in results),
        "max_abs_diff_actions": max(r["max_abs_diff_actions"] for r in results),
        "reference_max_abs_diff_actions": max(
            (
                r["reference_max_abs_diff_actions"]
                for r in results
                if "reference_max_abs_diff_actions" in r
            ),
            default=None,
        ),
        "folders": folders,
        "cases": results,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    python = ensure_lerobot_venv()
    with tempfile.TemporaryDirectory(prefix="smolvla-crosscheck-") as work:
        summary = crosscheck(python, Path(work))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"largest difference (actions) {summary['max_abs_diff_actions']:.3g} -> {args.out}")


if __name__ == "__main__":
    main()
