"""LeRobot 0.6.1 as a reference implementation, in its own Python 3.12 venv.

LeRobot 0.5+ needs Python 3.12 and pins torch < 2.12, so it cannot share the project's venv;
this builds one under the cache folder (`~/.cache/vla-server/lerobot-0.6.1-...-py312`, about
4 minutes and 5.4 GB the first time, printing pip's progress) and reuses it after that: a
marker file written last records the requirement it was built for. Scripts then run in it as
subprocesses (`run_script`).

    python -m vla_harness.lerobot_env            # build or reuse; print its python
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

REQUIREMENT = "lerobot[pi,async,smolvla]==0.6.1"
VENV_NAME = "lerobot-0.6.1-pi-async-smolvla-py312"
MARKER = ".vla-server-complete"
PYTHON_CANDIDATES = (
    Path.home() / ".pyenv/versions/3.12.1/bin/python3",
    Path("/usr/bin/python3.12"),
    Path("/usr/local/bin/python3.12"),
)


def cache_dir() -> Path:
    base = os.environ.get("VLA_SERVER_CACHE") or Path.home() / ".cache" / "vla-server"
    return Path(base)


def find_python312() -> Path:
    """A Python 3.12 interpreter: $VLA_LEROBOT_PYTHON, pyenv's 3.12.1, or python3.12 on PATH."""
    env = os.environ.get("VLA_LEROBOT_PYTHON")
    found = shutil.which("python3.12")
    for candidate in (env, *PYTHON_CANDIDATES, found):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    raise FileNotFoundError("no Python 3.12 found (set VLA_LEROBOT_PYTHON)")


def ensure_lerobot_venv(root: Path | None = None, *, log=print) -> Path:
    """The LeRobot venv's python, building the venv first unless a complete one exists."""
    venv = (root or cache_dir()) / VENV_NAME
    python = venv / "bin" / "python"
    marker = venv / MARKER
    if marker.is_file() and marker.read_text().strip() == REQUIREMENT and python.is_file():
        log(f"lerobot venv: reusing {venv}")
        return python
    if venv.exists():
        log(f"lerobot venv: {venv} is incomplete; rebuilding it")
        shutil.rmtree(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    log(f"lerobot venv: creating {venv} with {find_python312()}")
    subprocess.run([str(find_python312()), "-m", "venv", str(venv)], check=True)
    log(f"lerobot venv: pip install {REQUIREMENT!r} (about 4 minutes, 5.4 GB)")
    _pip(python, ["install", "--upgrade", "pip"], log)
    _pip(python, ["install", REQUIREMENT], log)
    marker.write_text(REQUIREMENT + "\n")
    log("lerobot venv: ready")
    return python


def _pip(python: Path, args: list[str], log) -> None:
    """pip with its output streamed line by line, so a long install shows progress."""
    cmd = [str(python), "-m", "pip", "--disable-pip-version-check", *args]
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(("Collecting", "Installing", "Successfully", "ERROR")):
                log("  pip: " + line.rstrip())
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed with exit status {proc.returncode}")


def run_script(
    python: Path,
    script: Path,
    args: Sequence[str],
    *,
    timeout: float = 1800,
    cwd: Path | None = None,
) -> None:
    """Run `script` with the LeRobot venv's python, offline, its output passed through (in
    `cwd`: LeRobot's loggers write a `logs/` folder where they run)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)  # the project's modules must not shadow LeRobot's imports
    subprocess.run(
        [str(python), str(script), *map(str, args)],
        check=True,
        env=env,
        timeout=timeout,
        cwd=cwd,
    )


def main() -> None:
    print(ensure_lerobot_venv())


if __name__ == "__main__":
    sys.exit(main())
