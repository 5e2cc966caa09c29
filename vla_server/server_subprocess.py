"""Start a real `vla-server serve` in a subprocess on a free port, and always clean it up.

Used by the tests, the benchmarks and the ROS bridge tools.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

START_TIMEOUT_S = 180.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class ServerProcess:
    proc: subprocess.Popen
    port: int
    log_path: Path
    api_key: str | None = None
    children: list[psutil.Process] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, timeout: float = 120.0) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return httpx.Client(base_url=self.url, timeout=timeout, headers=headers)

    def async_client(self, timeout: float = 120.0, **kw: object) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return httpx.AsyncClient(base_url=self.url, timeout=timeout, headers=headers, **kw)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def node_children(self) -> list[psutil.Process]:
        """The node's child processes, without Python's multiprocessing resource tracker."""
        kids = psutil.Process(self.proc.pid).children(recursive=True)
        return [k for k in kids if "resource_tracker" not in " ".join(k.cmdline())]

    def ipc_dir(self) -> Path:
        for conn in psutil.Process(self.proc.pid).net_connections(kind="unix"):
            if conn.laddr and "vla-server-" in conn.laddr:
                return Path(conn.laddr).parent
        raise AssertionError("no ipc socket found for the node")

    def wait_exit(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None


def _wait_healthy(server: ServerProcess) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(
                f"server exited with {server.proc.returncode}:\n{server.log()[-4000:]}"
            )
        try:
            if httpx.get(server.url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    raise RuntimeError(f"server did not become healthy:\n{server.log()[-4000:]}")


def _stop(server: ServerProcess) -> None:
    procs = [server.proc.pid]
    with contextlib.suppress(psutil.Error):
        procs += [c.pid for c in psutil.Process(server.proc.pid).children(recursive=True)]
    if server.proc.poll() is None:
        server.proc.send_signal(signal.SIGTERM)
        if server.wait_exit(15) is None:
            server.proc.kill()
            server.proc.wait(5)
    for pid in procs:  # never leave a child behind, whatever the test did
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def run_server(
    model_path: str | Path | None,
    tmp_path: Path,
    *args: str,
    api_key: str | None = None,
    env: dict[str, str] | None = None,
) -> Iterator[ServerProcess]:
    port = free_port()
    log_path = tmp_path / f"server-{port}.log"
    cmd = [sys.executable, "-m", "vla_server.entrypoints.cli", "serve", "--port", str(port)]
    if model_path is not None:
        cmd += ["--model-path", str(model_path)]
    if api_key:
        cmd += ["--api-key", api_key]
    cmd += list(args)
    full_env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        **(env or {}),
    }
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=full_env)
    server = ServerProcess(proc, port, log_path, api_key)
    try:
        _wait_healthy(server)
        yield server
    finally:
        _stop(server)
