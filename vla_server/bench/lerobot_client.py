"""LeRobot 0.6.1's own `RobotClient` against the node's LeRobot door, checked chunk by chunk.

    python -m vla_server.bench lerobot-client [--seconds 30] [--tiny NAME ...]
        [--out bench_out/lerobot_client] [--fixtures tests/fixtures/lerobot_grpc]

For each tiny folder (default: `registry.LEROBOT_CLIENT_TINIES`, types LeRobot's own
policy_server serves, for an SO-100-like arm): a node with `--lerobot-grpc-port`, and
LeRobot's client (in LeRobot's own venv, `vla_harness.lerobot_env`, built on first use) for
`--seconds` on a hardware-free robot that follows the policy's features
(`lerobot_client_script.py`): its cameras, as many joints as its state (an SO-100's names for a
6-dim state, `j0`, `j1`, ... otherwise), the first ones driven by its actions. Then every
chunk the client received must equal `POST /v1/actions` on its observation under the door's
noise rule (within 1e-5), follow LeRobot's timesteps and timestamps, and the client must have
merged overlapping chunks (its aggregation ran). Writes `<name>.json` (the numbers) under
`--out`; with `--fixtures`, also the run's first gRPC calls as the replay fixture
`<name>.json` there (`tests/integration/test_lerobot_replay.py`).
"""

from __future__ import annotations

import argparse
import base64
import json
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from vla_harness.lerobot_env import ensure_lerobot_venv, run_script
from vla_harness.server_subprocess import free_port, run_server
from vla_server.bench.lerobot_check import (
    chunk_of,
    key,
    observation_of,
    reference_body,
    timing_problems,
)
from vla_server.policies.demo_robots import SO100_JOINTS
from vla_server.policies.registry import LEROBOT_CLIENT_TINIES, tiny_checkpoint

SCRIPT = Path(__file__).with_name("lerobot_client_script.py")
TASK = "pick up the red block"
FPS = 30
ACTIONS_PER_CHUNK = 50  # more than the tiny chunk: the door replies the whole chunk
FIXTURE_CHUNKS = 10  # the fixture keeps the calls up to the one that got this many chunks
TOLERANCE = 1e-5


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--tiny", nargs="+", default=list(LEROBOT_CLIENT_TINIES))
    p.add_argument("--out", type=Path, default=Path("bench_out/lerobot_client"))
    p.add_argument("--fixtures", type=Path, default=None, help="write replay fixtures here")


def mock_joints(state_dim: int) -> list[str]:
    """The mock robot's joints: an SO-100's for a 6-dim state, `j<i>` otherwise."""
    if state_dim == len(SO100_JOINTS):
        return list(SO100_JOINTS)
    return [f"j{i}" for i in range(state_dim)]


def state_names(robot: dict[str, Any]) -> list[str]:
    """The robot's observation keys, in state order."""
    return [f"{j}.pos" for j in robot["joints"]]


def served_name(tiny: str) -> str:
    return f"tiny-{tiny}"  # --served-model-name: the client names it, on any machine


def serve_flags(port: int, tiny: str) -> list[str]:
    return ["--lerobot-grpc-port", str(port), "--served-model-name", served_name(tiny)]


def client_args(port: int, tiny: str, seconds: float, robot: dict[str, Any]) -> list[str]:
    return [
        f"--server_address=127.0.0.1:{port}",
        f"--policy_type={robot['policy_type']}",
        f"--pretrained_name_or_path={served_name(tiny)}",
        f"--task={TASK}",
        f"--seconds={seconds}",
        f"--state_dim={robot['state_dim']}",
        f"--action_dim={robot['action_dim']}",
        f"--cameras={','.join(robot['cameras'])}",
        f"--joints={','.join(robot['joints'])}",
        f"--actions_per_chunk={ACTIONS_PER_CHUNK}",
        f"--fps={FPS}",
    ]


def run_tiny(python: Path, tiny: str, seconds: float, work: Path) -> dict[str, Any]:
    """One node, one client run, every chunk checked: the report (with the recording)."""
    port = free_port()
    with run_server(tiny_checkpoint(tiny), work, *serve_flags(port, tiny)) as server:
        with server.client() as c:
            info = c.get("/get_model_info").json()
        robot = {
            "policy_type": info["actions"]["policy_type"],
            "state_dim": info["robot"]["state_dim"],
            "action_dim": info["actions"]["action_dim"],
            "cameras": info["robot"]["cameras"],
            "joints": mock_joints(info["robot"]["state_dim"]),
        }
        out = work / "client.json"
        run_script(python, SCRIPT, [out, *client_args(port, tiny, seconds, robot)], cwd=work)
        recording = json.loads(out.read_text())
        with server.client() as c:
            checked = check_recording(c, recording, robot, info["robot"]["chunk_size"])
    return {"tiny": tiny, "robot": robot, **checked, "recording": recording}


def check_recording(
    c: httpx.Client, recording: dict[str, Any], robot: dict[str, Any], chunk_size: int
) -> dict:
    """Every chunk the client received vs `/v1/actions`, and LeRobot's timing rules."""
    calls = recording["calls"]
    observations = [observation_of(x) for x in calls if x["method"] == "SendObservations"]
    sent = {key(o): o for o in observations}
    length = min(ACTIONS_PER_CHUNK, chunk_size)
    diffs, problems = [], []
    for call in calls:
        if call["method"] != "GetActions" or call.get("code") != "OK":
            continue
        chunk = chunk_of(base64.b64decode(call["reply"]))
        if chunk is None:
            continue
        obs = sent[(chunk.timesteps[0], chunk.timestamps[0])]
        problems += timing_problems(chunk, obs, FPS, length)
        r = c.post("/v1/actions", json=reference_body(obs, state_names(robot)))
        r.raise_for_status()
        expected = np.asarray(r.json()["actions"], dtype=np.float32)[:length]
        diffs.append(float(np.abs(chunk.actions - expected).max()))
    client_chunks = recording["chunks"]
    types = Counter(a["type"] for ch in client_chunks for a in ch)
    return {
        "chunks": len(diffs),
        "client_chunks": len(client_chunks),
        "max_abs_diff": max(diffs, default=float("nan")),
        "timing_problems": problems,
        "aggregated_actions": sum(recording["aggregated"]),
        "executed_actions": recording["executed"],
        "action_types": dict(types),
        "calls": dict(Counter(f"{x['method']}:{x.get('code')}" for x in calls)),
        "observations_sent": len(sent),
    }


def fixture(report: dict[str, Any]) -> dict[str, Any]:
    """The replay fixture: the run's calls up to the `FIXTURE_CHUNKS`th chunk and the sending
    of its observation (a `GetActions` starts before the observation it answers is sent), and
    what the node was."""
    calls: list[dict[str, Any]] = []
    sent: set[tuple[int, float]] = set()
    chunks, wanted = 0, None
    for call in report["recording"]["calls"]:
        calls.append({k: call[k] for k in ("method", "requests", "code", "reply") if k in call})
        if call["method"] == "SendObservations":
            sent.add(key(observation_of(call)))
        elif wanted is None and call["method"] == "GetActions" and call.get("code") == "OK":
            chunk = chunk_of(base64.b64decode(call["reply"]))
            chunks += chunk is not None
            if chunk is not None and chunks >= FIXTURE_CHUNKS:
                wanted = (chunk.timesteps[0], chunk.timestamps[0])
        if wanted in sent:
            break
    tiny = report["tiny"]
    return {
        "about": "gRPC calls of LeRobot's RobotClient against the LeRobot door, recorded by "
        "`python -m vla_server.bench lerobot-client`; replayed by test_lerobot_replay.py",
        "tiny": tiny,  # registry.tiny_checkpoint(tiny)
        "served_model_name": served_name(tiny),
        "fps": FPS,
        "versions": report["recording"]["versions"],
        "robot": report["robot"],
        "calls": calls,
    }


def summary(report: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in report.items() if k != "recording"}


def run(args: argparse.Namespace) -> None:
    python = ensure_lerobot_venv()
    args.out.mkdir(parents=True, exist_ok=True)
    failed = []
    for tiny in args.tiny:
        with tempfile.TemporaryDirectory() as tmp:
            report = run_tiny(python, tiny, args.seconds, Path(tmp))
        (args.out / f"{tiny}.json").write_text(json.dumps(summary(report), indent=2) + "\n")
        print(json.dumps(summary(report), indent=2))
        if args.fixtures is not None:
            args.fixtures.mkdir(parents=True, exist_ok=True)
            (args.fixtures / f"{tiny}.json").write_text(json.dumps(fixture(report)) + "\n")
        ok = (
            report["chunks"] > 0
            and report["chunks"] == report["client_chunks"]
            and report["max_abs_diff"] <= TOLERANCE
            and not report["timing_problems"]
            and report["aggregated_actions"] > 0
        )
        failed += [] if ok else [tiny]
    if failed:
        raise SystemExit(f"lerobot-client: checks failed for {failed}")
