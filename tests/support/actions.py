"""OpenVLA's published action decoding, written out independently of the server, and action
requests on the demo VLA.

The reference follows OpenVLA's `ActionTokenizer.decode_token_ids_to_actions` and
`OpenVLAForActionPrediction.predict_action`: bins = linspace(min_action, max_action, n_bins),
centres of consecutive bins, bin index = clip(vocab_size - id - 1, 0, n_centres - 1), then
0.5 * (x + 1) * (q99 - q01) + q01 where mask is true. The statistics are read straight from the
checkpoint's `action_tokenizer.json`, not through the server's ActionTokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from tests.support.images import image_payload, random_rgb
from vla_harness.server_subprocess import ServerProcess

PROMPT = "What action should the robot take to pick up the red block?"


def demo_path() -> Path:
    from vla_server.policies.llava.demo import demo_model_path

    return demo_model_path()


def read_action_config(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "action_tokenizer.json").read_text())


def bin_range(cfg: dict[str, Any]) -> range:
    first = cfg["bin_token_ids"]["first"]
    return range(first, first + cfg["n_bins"])


def openvla_actions(
    ids: list[int], vocab_size: int, spec: dict[str, Any], unnorm_key: str
) -> np.ndarray:
    """OpenVLA's decode + un-normalisation of `ids` (a whole number of actions), with the bins
    the last ids below `vocab_size`."""
    bins = np.linspace(spec.get("min_action", -1.0), spec.get("max_action", 1.0), spec["n_bins"])
    centres = (bins[:-1] + bins[1:]) / 2.0
    discretized = vocab_size - np.asarray(ids, dtype=np.int64)
    normalized = centres[np.clip(discretized - 1, a_min=0, a_max=centres.shape[0] - 1)]
    stats = spec["norm_stats"][unnorm_key]["action"]
    q01, q99 = np.asarray(stats["q01"]), np.asarray(stats["q99"])
    mask = np.asarray(stats.get("mask", np.ones_like(q01, dtype=bool)))
    actions = normalized.reshape(-1, spec["action_dim"])
    return np.where(mask, 0.5 * (actions + 1) * (q99 - q01) + q01, actions)


def openvla_decode(token_ids: list[int], cfg: dict[str, Any], unnorm_key: str) -> np.ndarray:
    """`openvla_actions` with the bins where the checkpoint's config puts them."""
    return openvla_actions(token_ids, bin_range(cfg).stop, cfg, unnorm_key)


def instruction_messages(instruction: str, num_images: int) -> list[dict[str, Any]]:
    """The layout the actions front ends promise: the instruction first, the images last."""
    parts: list[dict[str, Any]] = [{"type": "text", "text": instruction}]
    return [{"role": "user", "content": parts + [{"type": "image"}] * num_images}]


class Demo:
    """A node serving the demo VLA, with what its checkpoint says about the action bins."""

    def __init__(self, path: Path, server: ServerProcess):
        from transformers import AutoTokenizer

        self.path = path
        self.server = server
        self.spec = read_action_config(path)
        tokenizer = AutoTokenizer.from_pretrained(path)
        self.vocab_size = len(tokenizer)
        self.base_vocab_size = tokenizer.vocab_size
        config = json.loads((path / "config.json").read_text())
        self.padded_vocab_size = config["text_config"]["vocab_size"]
        self.first_bin = self.vocab_size - self.spec["n_bins"]

    def body(self, seed: int, unnorm_key: str, num_actions: int, **extra: Any) -> dict[str, Any]:
        return {
            "text": PROMPT,
            "image_data": image_payload(random_rgb(120, 160, seed=seed), "png"),
            "num_actions": num_actions,
            "unnorm_key": unnorm_key,
            "sampling_params": {"temperature": 0},
            **extra,
        }
