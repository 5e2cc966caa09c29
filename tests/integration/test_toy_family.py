"""A policy family from outside the package (`tests/toy_policy/`), registered at start-up with
`--policy-plugin`, served end to end through `/v1/actions`, the openpi WebSocket and
`/generate`: its chunks equal an independent computation (transformers' Llama for the prompt's
keys, the head's formula in numpy, the node's documented seeded noise)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file

from tests.support.server import module_server
from tests.toy_policy.build import SETTINGS, build_toy
from tests.toy_policy.head import PREFIX
from vla_server.model.denoise import denoise_times, initial_noise

ROOT = Path(__file__).resolve().parents[2]
STATE = [0.5, -1.25]


def _folder() -> Path:
    return build_toy(Path(tempfile.mkdtemp(prefix="toy-policy-")))


toy_server = module_server(
    _folder, "--policy-plugin", "tests.toy_policy.family", env={"PYTHONPATH": str(ROOT)}
)


def reference_chunk(folder: Path, text: str, state: list[float], seed: int) -> np.ndarray:
    """The toy head's chunk computed without the node: transformers' Llama gives layer 0's
    keys over the prompt; the velocity and Euler steps are the head's formula in numpy."""
    import json

    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    config = json.loads((folder / "config.json").read_text())
    decoder = LlamaConfig(**config["decoder"])
    model = LlamaForCausalLM(decoder).eval()
    tensors = load_file(folder / "model.safetensors")
    model.load_state_dict({k: v for k, v in tensors.items() if not k.startswith(PREFIX)})
    ids = AutoTokenizer.from_pretrained(str(folder), config=decoder)(text)["input_ids"]
    with torch.no_grad():
        cache = model(torch.tensor([ids]), use_cache=True).past_key_values
    keys = cache.layers[0].keys[0].transpose(0, 1).reshape(len(ids), -1).double().numpy()
    w = {k[len(PREFIX) :]: v.double().numpy() for k, v in tensors.items() if k.startswith(PREFIX)}
    width, steps = SETTINGS["width"], SETTINGS["num_steps"]
    s = np.zeros(width)
    s[: len(state)] = state
    x = initial_noise(seed, SETTINGS["chunk_size"], width)[0].double().numpy()
    context = np.tanh(w["context.weight"] @ keys.mean(0))
    for t in denoise_times(steps):
        v = context + x * w["scale_x"] + t * w["scale_t"] + s * w["scale_state"]
        x = x + (-1.0 / steps) * v
    return x[:, : SETTINGS["action_dim"]]


def test_v1_actions_serves_the_toy_chunk(toy_server):
    with toy_server.client() as c:
        r = c.post("/v1/actions", json={"instruction": "stack the cups", "state": STATE, "seed": 7})
        bad = c.post("/v1/actions", json={"instruction": "x", "state": [1.0], "seed": 7})
        info = c.get("/model_info").json()
    folder = Path(info["model_path"])
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["finish_reason"] == "actions" and out["num_actions"] == SETTINGS["chunk_size"]
    expected = reference_chunk(folder, "stack the cups\n", STATE, 7)
    np.testing.assert_allclose(np.asarray(out["actions"]), expected, rtol=0, atol=1e-4)
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "state"
    assert info["actions"]["kind"] == "toy"


def test_generate_and_the_openpi_websocket_give_the_same_chunk(toy_server):
    from openpi_client import websocket_client_policy

    with toy_server.client() as c:
        gen = c.post(
            "/generate",
            json={"text": "stack the cups\n", "num_actions": 2, "state": STATE,
                  "sampling_params": {"seed": 11}},
        )  # fmt: skip
        folder = Path(c.get("/model_info").json()["model_path"])
    assert gen.status_code == 200, gen.text
    client = websocket_client_policy.WebsocketClientPolicy("127.0.0.1", toy_server.port)
    assert client.get_server_metadata()["action_horizon"] == SETTINGS["chunk_size"]
    ws = client.infer({"prompt": "stack the cups", "state": np.asarray(STATE), "seed": 11})
    expected = reference_chunk(folder, "stack the cups\n", STATE, 11)
    np.testing.assert_allclose(np.asarray(gen.json()["actions"]), expected[:2], atol=1e-4)
    np.testing.assert_allclose(ws["actions"], expected, atol=1e-4)
