"""LeRobot 0.6.1's `PI0Policy` / `PI05Policy` as a timed reference on a pi folder (`bench pi`):
the observations `paths.observation` makes, run in LeRobot's venv by `lerobot_script.py`
(`predict_action_chunk` from the same noise; its images in [0, 1] at the model's resolution,
its language tokens and state given, as LeRobot's preprocessor would hand them over), and the
node's chunks for the same observations, so that the two are seen to compute the same thing.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from vla_harness.lerobot_env import ensure_lerobot_venv, run_script
from vla_server.policies.pi_common.bench.paths import PHASES, NodePath, PhaseTimer, observation

SCRIPT = Path(__file__).with_name("lerobot_script.py")


def _write_observations(path: Path, folder: Path, n: int, state_dim: int) -> list[Any]:
    obs = [observation(folder, seed=500 + i) for i in range(n)]
    np.savez(
        path,
        pixels=np.stack([((o.pixels + 1) / 2).numpy() for o in obs]),
        state=np.stack([o.state[:state_dim].numpy() for o in obs]),
        tokens=np.stack([np.asarray(o.text_ids, dtype=np.int64) for o in obs]),
        noise=np.stack([o.noise.numpy() for o in obs]),
    )
    return obs


def lerobot_reference(folder: Path, kind: str, threads: list[int], n: int) -> dict[str, Any]:
    """LeRobot's time per chunk (P50 of `n`, after one warm-up observation) and per phase at
    each thread count, and how far its chunks are from the node's."""
    raw = json.loads((folder / "config.json").read_text())
    state_dim = raw["input_features"]["observation.state"]["shape"][0]
    action_dim = raw["output_features"]["action"]["shape"][0]
    work = Path(tempfile.mkdtemp(prefix="vla-bench-lerobot-pi-"))
    obs = _write_observations(work / "obs.npz", folder, n + 1, state_dim)
    print(f"{kind}: LeRobot {kind} policy in its own venv, {n} observations ...", flush=True)
    run_script(ensure_lerobot_venv(), SCRIPT,
               [folder, kind, work / "obs.npz", work / "out.npz", *threads], cwd=work)  # fmt: skip
    out = np.load(work / "out.npz")
    times = json.loads(str(out["times"]))
    node = NodePath(folder)
    node_chunks = [node.sample(o, PhaseTimer())[:, :action_dim].numpy() for o in obs]
    worst = float(np.abs(np.stack(node_chunks) - out["chunks"]).max())
    by_threads = {}
    for count, rows in times.items():
        timed = rows[1:]
        by_threads[count] = {
            "p50_ms": 1e3 * statistics.median(r["total"] for r in timed),
            "phases_p50_ms": {p: 1e3 * statistics.median(r[p] for r in timed) for p in PHASES},
            "totals_s": [r["total"] for r in timed],
        }
    return {"kind": kind, "by_threads": by_threads, "max_chunk_difference": worst}
