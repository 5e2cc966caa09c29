"""Start `vla-server serve` as a child process group, wait for it, and take it down again.

Used by `vla-bridge` (off ROS, where the launch file's ExecuteProcess is not available), by the
bridge benchmark and by the tests that kill and restart a server on the same port. The server
runs in its own session, so `kill()` reaches its scheduler and detokenizer children as well.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

START_TIMEOUT_S = 300.0


def serve_command(model: str, host: str, port: int, extra: Sequence[str] = ()) -> list[str]:
    """`vla-server serve` as this interpreter runs it ('' model = the embedded demo)."""
    cmd = [sys.executable, "-m", "vla_server.entrypoints.cli", "serve"]
    cmd += ["--host", host, "--port", str(port)]
    if model:
        cmd += ["--model-path", model]
    return cmd + list(extra)


@dataclass
class ServerHandle:
    proc: subprocess.Popen[bytes]
    url: str
    log_path: Path | None

    def log_tail(self, n_chars: int = 4000) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")[-n_chars:]

    def wait_healthy(self, timeout_s: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"vla-server exited with {self.proc.returncode}:\n{self.log_tail()}"
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/health", timeout=2.0).status_code == 200:
                    return
            time.sleep(0.25)
        raise RuntimeError(f"vla-server did not become healthy:\n{self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL to the server's whole process group: a crash, as the bridge sees it."""
        self._signal_group(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM (graceful), SIGKILL after `grace_s`; nothing of the group survives."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(grace_s)
        self._signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)

    def _signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)  # the group this module created (start_new_session)


def start_server(
    model: str = "",
    host: str = "127.0.0.1",
    port: int = 30000,
    *,
    log_path: Path | None = None,
    extra: Sequence[str] = (),
) -> ServerHandle:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    out = open(log_path, "ab") if log_path is not None else None  # noqa: SIM115
    try:
        proc = subprocess.Popen(
            serve_command(model, host, port, extra),
            stdout=out,
            stderr=subprocess.STDOUT if out else None,
            env=env,
            start_new_session=True,
        )
    finally:
        if out is not None:
            out.close()  # the child holds its own descriptor
    return ServerHandle(proc, f"http://{host}:{port}", log_path)


@contextlib.contextmanager
def running_server(
    model: str = "",
    host: str = "127.0.0.1",
    port: int = 30000,
    *,
    log_path: Path | None = None,
    extra: Sequence[str] = (),
) -> Iterator[ServerHandle]:
    """A healthy server for the `with` block; always taken down afterwards."""
    server = start_server(model, host, port, log_path=log_path, extra=extra)
    try:
        server.wait_healthy()
        yield server
    finally:
        server.stop()
