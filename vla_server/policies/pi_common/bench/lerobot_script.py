"""LeRobot 0.6.1's own `PI0Policy` / `PI05Policy` on a pi folder of any size, timed: run in
LeRobot's venv (`lerobot_reference.py` drives it; it imports nothing of the project).

    python lerobot_script.py FOLDER KIND OBSERVATIONS.npz OUT.npz THREADS [THREADS ...]

LeRobot names only full-size Gemmas and a fixed So400m SigLIP with a 257152-token vocabulary,
so, in this process only, `get_gemma_config` returns the folder's dimensions and the PaliGemma
config LeRobot builds keeps the folder's vision tower and vocabulary (the values LeRobot writes
over them are dropped). Every tensor of the folder must load (LeRobot only warns): the script
fails otherwise. Then per thread count and observation: `predict_action_chunk` from the given
noise, timed, with LeRobot's own `embed_prefix` and `denoise_step` calls timed inside it (the
prefix forward is the rest). Writes each observation's chunk and the times.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

PINNED = {
    "top": {"_vocab_size", "image_token_index", "image_token_id"},
    "text": {"vocab_size"},
    "vision": {"intermediate_size", "projection_dim", "projector_hidden_act"},
}


def _pin(config, keys: set[str]) -> None:
    """Make `config` drop later writes of `keys` (LeRobot's full-size values); `AutoModel`
    builds the same model for it as for its own class."""
    from transformers.models.auto.modeling_auto import MODEL_MAPPING

    def setattr_pinned(self, name, value):
        if name in keys and getattr(self, "_pinned_ready", False):
            return
        object.__setattr__(self, name, value)

    cls = type(config)
    pinned = type("Pinned" + cls.__name__, (cls,), {"__setattr__": setattr_pinned})
    if cls in MODEL_MAPPING:
        MODEL_MAPPING.register(pinned, MODEL_MAPPING[cls], exist_ok=True)
    config.__class__ = pinned
    object.__setattr__(config, "_pinned_ready", True)


def patch_sizes(modeling, raw: dict) -> None:
    from transformers import PaliGemmaConfig

    text, dit = raw["vlm_config"]["text_config"], raw["dit_config"]
    original = modeling.get_gemma_config

    def gemma(variant: str):
        dims = {"gemma_2b": text, "gemma_300m": dit}[variant]
        return original("gemma_2b").__class__(
            width=dims["hidden_size"], depth=dims["num_hidden_layers"],
            mlp_dim=dims["intermediate_size"], num_heads=dims["num_attention_heads"],
            num_kv_heads=dims["num_key_value_heads"], head_dim=dims["head_dim"],
        )  # fmt: skip

    def paligemma():
        config = PaliGemmaConfig.from_dict(raw["vlm_config"])
        config.vision_config.projection_dim = config.text_config.hidden_size
        _pin(config, PINNED["top"])
        _pin(config.text_config, PINNED["text"])
        _pin(config.vision_config, PINNED["vision"])
        return config

    mapping = dict(modeling.CONFIG_MAPPING.items())
    mapping["paligemma"] = paligemma
    modeling.get_gemma_config = gemma
    modeling.CONFIG_MAPPING = mapping


def lerobot_folder(folder: Path, work: Path) -> tuple[Path, dict]:
    """The folder as LeRobot reads it: its config without the size dicts LeRobot's config class
    refuses (they go to the patch), the other files linked."""
    raw = json.loads((folder / "config.json").read_text())
    out = work / "lerobot-folder"
    out.mkdir()
    for item in folder.iterdir():
        if item.name != "config.json":
            (out / item.name).symlink_to(item)
    sizes = {k: raw.pop(k) for k in ("vlm_config", "dit_config")}
    (out / "config.json").write_text(json.dumps(raw))
    return out, sizes


def load(folder: Path, kind: str, work: Path):
    modeling = importlib.import_module(f"lerobot.policies.{kind}.modeling_{kind}")
    readable, sizes = lerobot_folder(folder, work)
    patch_sizes(modeling, sizes)
    policy_cls = modeling.PI0Policy if kind == "pi0" else modeling.PI05Policy
    policy = policy_cls.from_pretrained(str(readable)).eval()
    from safetensors.torch import load_file

    saved = load_file(str(folder / "model.safetensors"))
    own = policy.state_dict()
    for name, tensor in saved.items():
        key = name if name in own else "model." + name
        if key not in own or not torch.equal(own[key].float(), tensor.float()):
            sys.exit(f"{name}: not loaded as saved")
    return policy


def timed_calls(obj, name: str, seconds: list[float]) -> None:
    """Wrap `obj.name` so each call adds its wall time to `seconds[0]`."""
    inner = getattr(obj, name)

    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        out = inner(*args, **kwargs)
        seconds[0] += time.perf_counter() - t0
        return out

    setattr(obj, name, wrapper)


def main() -> None:
    folder, kind, obs_path, out_path = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    threads = [int(n) for n in sys.argv[5:]]
    policy = load(folder, kind, Path(out_path).parent)
    embed, denoise = [0.0], [0.0]
    timed_calls(policy.model, "embed_prefix", embed)
    timed_calls(policy.model, "denoise_step", denoise)
    obs = np.load(obs_path)
    cameras = list(policy.config.image_features)
    results, chunks = {}, []
    for n in threads:
        torch.set_num_threads(n)
        rows = []
        for i in range(len(obs["noise"])):
            batch = {
                cam: torch.from_numpy(obs["pixels"][i, c][None]) for c, cam in enumerate(cameras)
            }
            batch["observation.state"] = torch.from_numpy(obs["state"][i][None])
            batch["observation.language.tokens"] = torch.from_numpy(obs["tokens"][i][None])
            batch["observation.language.attention_mask"] = torch.ones_like(
                batch["observation.language.tokens"]
            ).bool()
            embed[0] = denoise[0] = 0.0
            t0 = time.perf_counter()
            with torch.no_grad():
                chunk = policy.predict_action_chunk(batch, noise=torch.from_numpy(obs["noise"][i]))
            total = time.perf_counter() - t0
            rows.append({"total": total, "vision": embed[0], "denoise": denoise[0],
                         "prefix": total - embed[0] - denoise[0]})  # fmt: skip
            if n == threads[0]:
                chunks.append(chunk[0].float().numpy())
        results[str(n)] = rows
        print(f"lerobot {kind}, {n} thread(s): {[round(1e3 * r['total']) for r in rows]} ms")
    np.savez(out_path, chunks=np.stack(chunks), times=json.dumps(results))


if __name__ == "__main__":
    main()
