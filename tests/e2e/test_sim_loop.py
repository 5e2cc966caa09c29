"""The closed loop: `vla-bridge sim` (gym-aloha's arms in MuJoCo) through the bridge and a live
`vla-server serve` on the ALOHA variant of the demo model, run as a user runs it.

Checked on the report and, independently, on the rosbag2 recording of the run (read with
rosbags): every control step gets exactly one command, for its own time; the executor's
commands never step further than the bound the action statistics allow; the recording replays.
The fault test kills the node for 2 s mid-run and restarts it. No wall-clock thresholds: the
rates are ones this machine sustains and the deadline is out of reach of a loaded machine.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("gym_aloha")

from rosbags.rosbag2 import Reader  # noqa: E402
from rosbags.typesys import Stores, get_typestore  # noqa: E402

from tests.support.paths import REPO  # noqa: E402
from tests.support.server import free_port, run_server  # noqa: E402
from vla_harness.server_subprocess import start_server  # noqa: E402
from vla_server.policies.llava.demo import aloha_demo_model_path  # noqa: E402
from vla_server.policies.pi0.demo import aloha_flow_demo_path  # noqa: E402

RATE_HZ, CAMERA_HZ = 50.0, 10.0
ACTION_HZ, NUM_ACTIONS = 5.0, 10  # `vla-bridge sim`'s defaults for the demo model
NS = 1_000_000_000
GENEROUS_DEADLINE_MS = 60_000.0
COMMAND_TIMEOUT_S = 60.0  # a step waits this long for its command: none is ever missed
FAULT_ACTION_HZ = 1.0  # the fault test's chunks span 10 s: dropping them is plain to see
TYPES = get_typestore(Stores.ROS2_JAZZY)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    with run_server(aloha_demo_model_path(), tmp_path_factory.mktemp("server")) as s:
        yield s


def sim_command(url: str, out: Path, seconds: float, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "ros_bridge.cli",
        "sim",
        "--server-url",
        url,
        "--seconds",
        str(seconds),
        "--rate",
        str(RATE_HZ),
        "--camera-rate",
        str(CAMERA_HZ),
        "--report",
        str(out / "report.json"),
        "--command-timeout",
        str(COMMAND_TIMEOUT_S),
        *extra,
    ]


def read_bag(path: Path) -> dict[str, list[Any]]:
    """Messages by topic, deserialised by rosbags from the bag's own definitions."""
    by_topic: dict[str, list[Any]] = {}
    with Reader(path) as reader:
        for conn, _, raw in reader.messages():
            by_topic.setdefault(conn.topic, []).append(TYPES.deserialize_cdr(raw, conn.msgtype))
    return by_topic


def stamp_ns(msg: Any) -> int:
    return msg.header.stamp.sec * NS + msg.header.stamp.nanosec


def target_ns(command: Any) -> int:
    tfs = command.points[0].time_from_start if command.points else None
    return stamp_ns(command) + (tfs.sec * NS + tfs.nanosec if tfs else 0)


def jump_bound() -> float:
    """2 · (largest q99 - q01 of the checkpoint's statistics) · control period / action period:
    the most an interpolating or ensembling executor may step (README)."""
    config = json.loads((aloha_demo_model_path() / "action_tokenizer.json").read_text())
    stats = config["norm_stats"]["aloha"]["action"]
    span = max(hi - lo for lo, hi in zip(stats["q01"], stats["q99"], strict=True))
    return 2 * span * ACTION_HZ / RATE_HZ


def test_ten_seconds_of_closed_loop_every_step_one_command(server, tmp_path: Path) -> None:
    bag = tmp_path / "loop.bag"
    cmd = sim_command(server.url, tmp_path, 10, "--plot", str(tmp_path / "loop.png"))
    cmd += ["--record", str(bag), "--param", f"deadline_ms:={GENEROUS_DEADLINE_MS}"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    r = json.loads((tmp_path / "report.json").read_text())
    assert r["steps"] == 10 * RATE_HZ and not r["interrupted"]
    assert r["command_timeouts"] == 0 and r["unmatched_commands"] == 0
    assert r["actions_applied"] + r["late_commands"] + r["stop_commands"] == r["steps"]
    assert r["holds"] == r["steps"] - r["actions_applied"]
    assert r["deadline_misses"] == 0 and r["chunks_received"] >= 1 and r["actions_applied"] > 0
    assert r["max_joint_jump"] <= jump_bound()
    assert (tmp_path / "loop.png").read_bytes()[:4] == b"\x89PNG"

    recorded = read_bag(bag)
    states, commands = recorded["/joint_states"], recorded["/commands"]
    frames = recorded["/camera/top/image_raw/compressed"]
    assert len(states) == len(commands) == r["steps"] and len(frames) == r["frames_published"]
    period_ns = round(NS / RATE_HZ)
    assert Counter(target_ns(c) for c in commands) == Counter(
        stamp_ns(s) + period_ns for s in states
    )  # one command per state, each for that state's next period
    chunk = [c for c in commands if c.points and target_ns(c) != stamp_ns(c)]
    assert len(chunk) == r["actions_applied"]
    assert all(target_ns(c) - stamp_ns(c) <= NUM_ACTIONS * NS / ACTION_HZ for c in chunk)
    positions = np.array([c.points[0].positions for c in sorted(commands, key=target_ns)])
    assert np.abs(np.diff(positions, axis=0)).max() <= jump_bound()

    replay = [sys.executable, "-m", "ros_bridge.cli", "replay", str(bag)]
    replay += ["--server-url", server.url, "--report", str(tmp_path / "replay.json")]
    replay += ["--rate", "4", "--param", f"deadline_ms:={GENEROUS_DEADLINE_MS}"]
    done = subprocess.run(replay, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    replayed = json.loads((tmp_path / "replay.json").read_text())
    assert replayed["frames_in"] == len(frames) and replayed["frames_processed"] >= 1


def test_rtc_loop_on_the_flow_demo(tmp_path: Path) -> None:
    """The tiny pi0 for the arms, `executor: rtc`: the requests carry the plan's tail and the
    robot's state, the server takes them, every step gets its command."""
    params = ("executor:=rtc", "num_actions:=50", "action_rate_hz:=50.0")
    extra = [a for p in params for a in ("--param", p)]
    extra += ["--param", f"deadline_ms:={GENEROUS_DEADLINE_MS}"]
    (tmp_path / "server").mkdir()
    with run_server(aloha_flow_demo_path(), tmp_path / "server") as server:
        cmd = sim_command(server.url, tmp_path, 6, *extra)
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    r = json.loads((tmp_path / "report.json").read_text())
    assert r["command_timeouts"] == 0 and r["unmatched_commands"] == 0
    assert r["bridge_counters"]["request_errors"] == 0, done.stderr[-3000:]
    assert r["chunks_received"] >= 2 and r["executor_counters"]["rtc_guided"] >= 1
    assert r["switch_gap_mean"] is not None and r["actions_applied"] > 0


class LiveSim:
    """`vla-bridge sim` in its own process; its progress lines read as they come."""

    def __init__(self, cmd: list[str], log: Path) -> None:
        self.log = log
        self.chunks = 0
        self.proc = subprocess.Popen(
            cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        with self.log.open("w") as out:
            for line in self.proc.stdout:
                out.write(line)
                out.flush()
                if match := re.search(r"\bchunks=(\d+)", line):
                    self.chunks = int(match.group(1))

    def wait_for_chunks(self, n: int, timeout_s: float = 300.0) -> None:
        deadline = time.monotonic() + timeout_s
        while self.chunks < n:
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            assert time.monotonic() < deadline, f"no {n} chunks: {self.log.read_text()[-3000:]}"
            time.sleep(0.05)

    def interrupt(self) -> int:
        self.proc.send_signal(signal.SIGINT)  # ends the run; the report is still written
        code = self.proc.wait(120)
        self._reader.join(10)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def test_node_killed_for_two_seconds_mid_run(tmp_path: Path) -> None:
    model, port = aloha_demo_model_path(), free_port()
    server = start_server(model, port=port, log_path=tmp_path / "server.log")
    sim = None
    try:
        server.wait_healthy()
        slow_actions = f"action_rate_hz:={FAULT_ACTION_HZ}"
        cmd = sim_command(server.url, tmp_path, 900, "--param", slow_actions)
        sim = LiveSim(cmd, tmp_path / "sim.log")
        sim.wait_for_chunks(5)  # the loop is running, a request in flight
        killed_ns = time.time_ns()
        server.kill()
        time.sleep(2.0)
        server = start_server(model, port=port, log_path=tmp_path / "server-again.log")
        server.wait_healthy()
        sim.wait_for_chunks(sim.chunks + 3)
        assert sim.interrupt() == 0, sim.log.read_text()[-3000:]
    finally:
        if sim is not None:
            sim.kill()
        server.stop()
    check_fault_report(json.loads((tmp_path / "report.json").read_text()), killed_ns)


def check_fault_report(r: dict[str, Any], killed_ns: int) -> None:
    assert r["interrupted"] and r["command_timeouts"] == 0 and r["unmatched_commands"] == 0
    line = r["timeline"]
    killed_s = (killed_ns - line["start_ns"]) / NS
    steps = list(zip(line["t_s"], line["kind"], line["source_s"], line["values"], strict=True))
    after = [s for s in steps if s[0] > killed_s]
    first_late = next(i for i, s in enumerate(after) if s[1] == "l")
    # The executor held: on_late hold repeats the last target while the node is away...
    held = [i for i, s in enumerate(after) if s[1] == "l"]
    assert all(after[i][3] == after[i - 1][3] for i in held if i > 0)
    # ...gave up the old plan long before it ran out (its chunks spanned 10 s; chunks came
    # every second or faster, so it had at least 8 s left), and never went back to a chunk of
    # a frame from before the fault.
    newest_before = max(s[2] for s in steps if s[1] == "c" and s[2] <= killed_s)
    assert after[first_late][0] < newest_before + NUM_ACTIONS / FAULT_ACTION_HZ / 2
    assert [s for s in after[first_late:] if s[1] == "c" and s[2] <= killed_s] == []
    # The loop resumed: chunks of frames taken after the fault (served by the restarted node).
    assert any(s[1] == "c" and s[2] > killed_s for s in after)
    assert r["executor_counters"]["expiries"] >= 1 and r["bridge_counters"]["reconnects"] >= 1
