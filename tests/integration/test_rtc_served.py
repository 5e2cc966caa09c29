"""Real-time chunking (RTC) served: `prev_chunk`, `inference_delay`, `execution_horizon` and
`rtc` on `/v1/actions`, `/generate` and the openpi WebSocket, against the test-only reference
written from LeRobot's formula (`tests/support/rtc_reference.py`) over the dense pi0 / pi0.5
reference (the prefix recomputed at every step).

The tiny pi0 and pi0.5 variant for RTC (`rtc_model_path(kind)`, LeRobot's layout: a chunk of
50, long enough for delays of 10 and horizons of 25, and the flow matrices at half the tiny
spread: on the wide ones, Jacobian guidance is chaotic, a 1e-7 nudge of the noise moving the
reference's own vjp chunk by up to 9e-4, more than any parity tolerance).
12 cases per kind and Jacobian cover the four schedules, delays 0 / 3 / 10, horizons 10 / 25
and max_guidance_weight 1 / 10. The test normalises the previous chunk and the state and
unnormalises the chunks itself, from the statistics files, with LeRobot's formulas. The
previous chunk is the tail (actions 5..44) of the unguided chunk of another seed.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from tests.support import rtc_reference
from tests.support.families import family_tokenizer
from tests.support.images import png_base64, random_rgb
from tests.support.pi0_reference import SpecReference
from tests.support.pi0fast_reference import lerobot_pixels
from tests.support.server import module_server
from vla_server.policies.pi0.tiny import MAX_DIM, RTC_CHUNK, rtc_model_path
from vla_server.policies.pi_common.policy_inputs import clean_task
from vla_server.policies.pi_common.tiny_paligemma import ACTION_DIM, CAMERAS, IMAGE_SIZE
from vla_server.policies.smolvla.tiny import ACTION_DIM as SMOL_DIM
from vla_server.policies.smolvla.tiny import CAMERAS as SMOL_CAMERAS
from vla_server.policies.smolvla.tiny import smolvla_model_path

FRAMES = {CAMERAS[0]: random_rgb(40, 60, seed=1), CAMERAS[1]: random_rgb(28, 28, seed=2)}
INSTRUCTION = "pick up the red block"
STATE = [0.1, 1.2, 0.0, 3.3]
# (schedule, inference_delay, execution_horizon, max_guidance_weight)
CASES = [
    ("linear", 0, 10, 10.0), ("linear", 3, 25, 1.0), ("linear", 10, 25, 10.0),
    ("exp", 3, 10, 10.0), ("exp", 10, 10, 1.0), ("exp", 0, 25, 10.0),
    ("ones", 3, 25, 10.0), ("ones", 10, 25, 1.0), ("ones", 0, 10, 1.0),
    ("zeros", 3, 10, 10.0), ("zeros", 10, 25, 10.0), ("zeros", 0, 25, 1.0),
]  # fmt: skip
JACOBIANS = ("identity", "vjp")
PREV_SEED, PREV_ROWS = 900, slice(5, 45)


def folder(kind: str):
    return rtc_model_path(kind)


pi0_server = module_server(lambda: folder("pi0"))
pi05_server = module_server(lambda: folder("pi05"))
smolvla_server = module_server(smolvla_model_path)


def body(seed: int, **fields) -> dict:
    images = {name: png_base64(im) for name, im in FRAMES.items()}
    return {"instruction": INSTRUCTION, "image_data": images, "state": STATE, "seed": seed,
            **fields}  # fmt: skip


def guidance(prev: list, case: tuple, jacobian: str) -> dict:
    schedule, delay, horizon, beta = case
    rtc = {"schedule": schedule, "max_guidance_weight": beta, "jacobian": jacobian}
    return {"prev_chunk": prev, "inference_delay": delay, "execution_horizon": horizon,
            "rtc": rtc}  # fmt: skip


def post(server, b: dict, route: str = "/v1/actions") -> dict:
    with server.client() as c:
        r = c.post(route, json=b)
    assert r.status_code == 200, r.text
    return r.json()


def internal(server) -> dict:
    with server.client() as c:
        return c.get("/get_server_info").json()["internal_states"][0]


class Space:
    """LeRobot's normalisation of one tiny folder (mean-std for pi0, quantiles for pi0.5),
    from its statistics files, and the reference's inputs."""

    def __init__(self, kind: str):
        self.kind, self.folder = kind, folder(kind)
        self.state, self.action = self._stats("observation.state"), self._stats("action")
        self.reference = SpecReference(self.folder, kind)
        tokenizer = family_tokenizer(self.folder)
        self.ids = tokenizer(self._prompt())["input_ids"]
        self.pixels = torch.stack([lerobot_pixels(FRAMES[n], IMAGE_SIZE, IMAGE_SIZE)
                                   for n in CAMERAS])  # fmt: skip

    def _stats(self, feature: str) -> dict[str, np.ndarray]:
        name = "policy_preprocessor" if feature == "observation.state" else "policy_postprocessor"
        steps = json.loads((self.folder / f"{name}.json").read_text())["steps"]
        step = next(s for s in steps if "state_file" in s)
        flat = load_file(str(self.folder / step["state_file"]))
        return {k.split(".")[-1]: v for k, v in flat.items() if k.rsplit(".", 1)[0] == feature}

    def normalize(self, x: np.ndarray, stats: dict[str, np.ndarray]) -> np.ndarray:
        x = np.asarray(x, np.float32)
        if self.kind == "pi0":
            return (x - stats["mean"]) / (stats["std"] + np.float32(1e-8))
        return 2 * (x - stats["q01"]) / (stats["q99"] - stats["q01"]) - 1

    def unnormalize(self, x: np.ndarray) -> np.ndarray:
        a = self.action
        if self.kind == "pi0":
            return x * a["std"] + a["mean"]
        return (x + 1) * (a["q99"] - a["q01"]) / 2 + a["q01"]

    def _prompt(self) -> str:
        if self.kind == "pi0":
            return INSTRUCTION + "\n"
        bins = np.digitize(self.normalize(STATE, self.state), np.linspace(-1, 1, 257)[:-1]) - 1
        return f"Task: {clean_task(INSTRUCTION)}, State: {' '.join(map(str, bins))};\nAction: "

    def chunk(self, seed: int, prev: list | None, case: tuple, jacobian: str) -> np.ndarray:
        """The reference's chunk in robot units [H, action_dim]."""
        state = None
        if self.kind == "pi0":
            state = torch.zeros(MAX_DIM)
            state[:4] = torch.from_numpy(self.normalize(STATE, self.state))
        g = torch.Generator("cpu").manual_seed(seed)
        noise = torch.randn((1, RTC_CHUNK, MAX_DIM), generator=g, dtype=torch.float32)[0]
        guide = None
        if prev is not None:
            schedule, delay, horizon, beta = case
            normalized = torch.from_numpy(self.normalize(prev, self.action))
            guide = {"prev": normalized, "delay": delay, "horizon": horizon,
                     "schedule": schedule, "beta": beta, "jacobian": jacobian}  # fmt: skip
        x = rtc_reference.guided_sample(self.reference, self.pixels, [True, True], self.ids,
                                        state, noise, guide)  # fmt: skip
        return self.unnormalize(x[:, :ACTION_DIM].numpy())


@pytest.fixture(scope="module", params=["pi0", "pi05"])
def outcome(request) -> dict:
    """Per kind: every case served unguided and guided (both Jacobians), and the reference."""
    kind = request.param
    server = request.getfixturevalue(f"{kind}_server")
    space = Space(kind)
    prev = post(server, body(PREV_SEED))["actions"][PREV_ROWS]
    out: dict = {"kind": kind, "prev": np.asarray(prev), "cases": []}
    for n, case in enumerate(CASES):
        seed = 200 + n
        row = {"case": case, "unguided": np.asarray(post(server, body(seed))["actions"])}
        for jac in JACOBIANS:
            row[jac] = np.asarray(post(server, body(seed, **guidance(prev, case, jac)))["actions"])
            row[f"{jac}_reference"] = space.chunk(seed, prev, case, jac)
        out["cases"].append(row)
    return out


def test_served_guided_chunks_equal_lerobots_formula(outcome):
    assert len(CASES) >= 12
    assert {c[0] for c in CASES} == {"zeros", "ones", "linear", "exp"}
    assert {c[1] for c in CASES} == {0, 3, 10} and {c[2] for c in CASES} == {10, 25}
    for jac in JACOBIANS:
        worst = max(float(np.abs(r[jac] - r[f"{jac}_reference"]).max()) for r in outcome["cases"])
        print(f"rtc parity {outcome['kind']} {jac}: max |served - reference| = {worst:.3g}")
        assert worst <= 1e-4, (jac, worst)
    # The two Jacobians differ (the tiny expert's Jacobian is not 0) wherever weights are not 0.
    guided = [r for r in outcome["cases"] if r["case"][1] > 0]
    assert all(np.abs(r["identity"] - r["vjp"]).max() > 1e-4 for r in guided)


def test_a_zero_weight_schedule_is_the_unguided_chunk_bit_for_bit(outcome):
    zero = [r for r in outcome["cases"] if r["case"][0] == "zeros" and r["case"][1] == 0]
    assert zero
    for r in zero:
        for jac in JACOBIANS:
            np.testing.assert_array_equal(r[jac], r["unguided"])


def test_the_first_delayed_actions_adhere_to_the_previous_chunk(outcome):
    prev = outcome["prev"]
    for jac in JACOBIANS:
        ratios = []
        for r in outcome["cases"]:
            d = r["case"][1]
            if d == 0:
                continue
            guided = np.abs(r[jac][:d] - prev[:d]).mean()
            unguided = np.abs(r["unguided"][:d] - prev[:d]).mean()
            assert guided < unguided, (r["case"], jac, guided, unguided)
            ratios.append(guided / unguided)
        kind = outcome["kind"]
        mean, most = float(np.mean(ratios)), max(ratios)
        print(f"rtc adherence {kind} {jac}: mean ratio guided/unguided distance {mean:.3f} "
              f"over {len(ratios)} cases (max {most:.3f})")  # fmt: skip


# ---- batching: robots with and without guidance in one pass -------------------------------

ROBOTS = [  # (inference_delay, execution_horizon, rtc) per guided robot; the fifth has none
    (0, 10, {"schedule": "linear"}),
    (3, 25, {"schedule": "exp", "jacobian": "vjp"}),
    (10, 25, {"schedule": "ones", "max_guidance_weight": 1.0}),
    (5, 10, {"schedule": "zeros", "jacobian": "vjp"}),
    None,
]


def _generate_fields(k: int, prev: list) -> dict:
    """Robot k's /generate fields (its own camera frames, instruction and seed)."""
    frames = [png_base64(random_rgb(30 + 7 * k, 40, seed=10 + 2 * k + i)) for i in range(2)]
    fields = {"text": f"{INSTRUCTION} {k}\n", "image_data": frames,
              "sampling_params": {"seed": 60 + k}}  # fmt: skip
    if ROBOTS[k] is not None:
        delay, horizon, rtc = ROBOTS[k]
        fields.update(prev_chunk=prev, inference_delay=delay, execution_horizon=horizon, rtc=rtc)
    return fields


def test_robots_with_and_without_guidance_in_one_pass_get_their_own_chunks(pi0_server):
    prev = post(pi0_server, body(PREV_SEED))["actions"][PREV_ROWS]
    shared = {"num_actions": RTC_CHUNK, "state": STATE}
    robots = [_generate_fields(k, prev) for k in range(len(ROBOTS))]
    alone = [post(pi0_server, {**r, **shared}, "/generate")["actions"] for r in robots]
    with pi0_server.client() as c:
        c.post("/flush_cache")  # so that together, too, each prompt is prefilled
    batch = {key: [r.get(key) for r in robots] for key in robots[0]} | shared
    before = internal(pi0_server)["model_counters"]
    together = post(pi0_server, batch, "/generate")
    after = internal(pi0_server)["model_counters"]
    # One batch, admitted together: each step is one plain pass (the unguided robot and the
    # identity ones) and one vjp pass; every robot denoised in the same 10 steps.
    assert after["expert_passes"] - before["expert_passes"] == 20
    assert after["expert_rows"] - before["expert_rows"] == 50
    worst = max(
        float(np.abs(np.asarray(t["actions"]) - np.asarray(a)).max())
        for t, a in zip(together, alone, strict=True)
    )
    print(f"rtc batching: max |together - alone| = {worst:.3g}")
    assert worst <= 1e-5


# ---- bad input ------------------------------------------------------------------------------

demo_server = module_server()  # the embedded demo VLA: token actions, no denoised chunk
GOOD = {"prev_chunk": [[0.0] * ACTION_DIM] * 20, "inference_delay": 3}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"prev_chunk": [[0.0] * (ACTION_DIM + 1)] * 20}, "prev_chunk"),  # wider than the action
        ({"prev_chunk": [[0.0] * ACTION_DIM] * (RTC_CHUNK + 1)}, "prev_chunk"),  # longer
        ({"prev_chunk": [[0.0] * ACTION_DIM, [0.0]]}, "prev_chunk"),  # ragged
        ({"prev_chunk": []}, "prev_chunk"),
        ({"prev_chunk": [["a", "b", "c"]]}, "prev_chunk[0][0]"),
        ({"inference_delay": None}, "inference_delay"),  # required with prev_chunk
        ({"inference_delay": -1}, "inference_delay"),
        ({"inference_delay": 11, "execution_horizon": 10}, "inference_delay"),  # beyond horizon
        ({"inference_delay": 21, "execution_horizon": 25}, "inference_delay"),  # beyond prev
        ({"execution_horizon": 0}, "execution_horizon"),
        ({"rtc": {"schedule": "cosine"}}, "rtc.schedule"),
        ({"rtc": {"jacobian": "full"}}, "rtc.jacobian"),
        ({"rtc": {"max_guidance_weight": 0}}, "rtc.max_guidance_weight"),
        ({"rtc": {"beta": 5}}, "rtc.beta"),
    ],
)
def test_bad_guidance_names_the_field_and_leaves_nothing(pi0_server, change, field):
    with pi0_server.client() as c:
        r = c.post("/v1/actions", json={**body(1), **GOOD, **change})
        assert r.status_code == 400, r.text
        assert r.json()["error"]["field"] == field, r.text
        assert c.get("/get_server_info").json()["num_pending_requests"] == 0
    state = internal(pi0_server)
    assert state["num_running_reqs"] == 0 and state["kv_pool"]["used"] == 0


def test_bad_guidance_on_generate_names_the_field(pi0_server):
    plain = {"text": INSTRUCTION + "\n", "image_data": [png_base64(FRAMES[n]) for n in CAMERAS]}
    with pi0_server.client() as c:
        r = c.post("/generate", json={**plain, **GOOD})  # no num_actions: no chunk to guide
        assert r.status_code == 400 and r.json()["error"]["field"] == "prev_chunk", r.text
        batch = {"text": [plain["text"]] * 2, "image_data": [plain["image_data"]] * 2,
                 "num_actions": 4, "state": STATE, **GOOD}  # fmt: skip
        r = c.post("/generate", json=batch)  # a batch needs one prev_chunk entry per prompt
        assert r.status_code == 400 and r.json()["error"]["field"] == "prev_chunk", r.text
        r = c.post("/generate", json={**batch, "prev_chunk": [GOOD["prev_chunk"]] * 2,
                                      "inference_delay": [3, 30]})  # fmt: skip
        assert r.status_code == 400, r.text
        assert r.json()["error"]["field"] == "inference_delay[1]", r.text
    state = internal(pi0_server)
    assert state["num_running_reqs"] == 0 and state["kv_pool"]["used"] == 0


def test_a_model_whose_actions_are_not_denoised_takes_no_prev_chunk(demo_server):
    b = {"instruction": "pick up the cup", "image_data": png_base64(random_rgb(32, 32)),
         "unnorm_key": "demo_arm", **GOOD}  # fmt: skip
    with demo_server.client() as c:
        r = c.post("/v1/actions", json=b)
        assert r.status_code == 400 and r.json()["error"]["field"] == "prev_chunk", r.text
        info = c.get("/get_server_info").json()
    assert info["num_pending_requests"] == 0 and info["kv_pool"]["used"] == 0


# ---- the openpi WebSocket -------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:connect\\(\\) must be used:DeprecationWarning")
def test_the_openpi_websocket_and_the_robot_socket_take_the_same_fields(pi0_server):
    from openpi_client import websocket_client_policy

    prev = post(pi0_server, body(PREV_SEED))["actions"][PREV_ROWS]
    fields = guidance(prev, ("exp", 3, 25, 10.0), "vjp")
    expected = post(pi0_server, body(21, **fields))["actions"]
    client = websocket_client_policy.WebsocketClientPolicy("127.0.0.1", pi0_server.port)
    obs = {f"observation/{name}": FRAMES[name] for name in CAMERAS}
    obs.update(state=np.asarray(STATE), prompt=INSTRUCTION, seed=21)
    out = client.infer({**obs, **fields, "prev_chunk": np.asarray(prev)})
    np.testing.assert_array_equal(out["actions"], np.asarray(expected))
    bad = np.asarray(prev)
    bad[0, 0] = np.nan
    with pytest.raises(RuntimeError, match="Error in inference server") as info:
        client.infer({**obs, **fields, "prev_chunk": bad})
    assert "prev_chunk: must be finite" in str(info.value)
    # vLLM-Omni's robot socket reads the same observation keys (a bare array back).
    url = f"ws://127.0.0.1:{pi0_server.port}/v1/realtime/robot/openpi"
    robot = websocket_client_policy.WebsocketClientPolicy(url)
    chunk = np.asarray(robot.infer({**obs, **fields, "prev_chunk": np.asarray(prev)}))
    np.testing.assert_array_equal(chunk, np.asarray(expected, dtype=np.float32))


# ---- SmolVLA: the same fields through another family's head --------------------------------


def test_smolvla_chunks_are_guided_too(smolvla_server):
    """The family-neutral path on SmolVLA's paged head (its chunk of 10): both Jacobians give
    finite chunks whose first delayed actions adhere to the previous chunk, the vjp differs
    from the identity, and a zero-weight schedule is the unguided chunk bit for bit."""
    names = [c.removeprefix("observation.images.") for c in SMOL_CAMERAS]
    frames = {n: png_base64(random_rgb(48, 64, seed=30 + i)) for i, n in enumerate(names)}
    b = {"instruction": INSTRUCTION, "image_data": frames, "state": [0.3] * SMOL_DIM}
    prev = post(smolvla_server, {**b, "seed": 5})["actions"][2:]
    unguided = np.asarray(post(smolvla_server, {**b, "seed": 6})["actions"])
    out = {}
    for jac in JACOBIANS:
        fields = guidance(prev, ("linear", 3, 8, 10.0), jac)
        out[jac] = np.asarray(post(smolvla_server, {**b, "seed": 6, **fields})["actions"])
        assert np.isfinite(out[jac]).all()
        p = np.asarray(prev)
        assert np.abs(out[jac][:3] - p[:3]).mean() < np.abs(unguided[:3] - p[:3]).mean()
        zero = guidance(prev, ("zeros", 0, 8, 10.0), jac)
        same = post(smolvla_server, {**b, "seed": 6, **zero})["actions"]
        np.testing.assert_array_equal(np.asarray(same), unguided)
    assert np.abs(out["identity"] - out["vjp"]).max() > 1e-5
