"""Start a real `vla-server serve` in a subprocess, wait until it is healthy, and take it down.

The one launcher behind the tests, the benchmarks, `vla-bridge` (off ROS, where the launch file's
ExecuteProcess is not available) and the served-ITL check. The node runs in its own session, so a
kill reaches its scheduler and detokenizer children too, and a Ctrl-C at the terminal reaches only
the caller, whose teardown then stops the node.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil

LOOPBACK = "127.0.0.1"
START_TIMEOUT_S = 300.0
STOP_GRACE_S = 15.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def serve_command(
    model: str | Path | None, host: str | None, port: int, extra: Sequence[str] = ()
) -> list[str]:
    """`vla-server serve` as this interpreter runs it (no model, or '': the embedded demo; no
    host: the node's default bind)."""
    cmd = [sys.executable, "-m", "vla_server.entrypoints.cli", "serve"]
    cmd += ["--host", host] if host is not None else []
    cmd += ["--port", str(port)]
    if model:
        cmd += ["--model-path", str(model)]
    return cmd + list(extra)


@dataclass
class ServerProcess:
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path | None = None
    api_key: str | None = None
    host: str = LOOPBACK

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def client(self, timeout: float = 120.0) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=timeout, headers=self._auth_headers())

    def async_client(self, timeout: float = 120.0, **kw: object) -> httpx.AsyncClient:
        headers = self._auth_headers()
        return httpx.AsyncClient(base_url=self.url, timeout=timeout, headers=headers, **kw)

    def _auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def log(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")

    def log_tail(self, n_chars: int = 4000) -> str:
        return self.log()[-n_chars:]

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

    def wait_healthy(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Until /health answers 200; raises with the log's tail if the node exits or hangs."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log_tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/health", timeout=2.0).status_code == 200:
                    return
            time.sleep(0.25)
        raise RuntimeError(
            f"server did not become healthy in {timeout_s:.0f} s:\n{self.log_tail()}"
        )

    def kill(self) -> None:
        """SIGKILL to the node's whole process group: a crash, as a client sees it."""
        self._signal_group(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """SIGTERM (graceful), SIGKILL after `grace_s`; nothing of the group survives."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.wait_exit(grace_s)
        self._signal_group(signal.SIGKILL)  # whatever is left, whatever the caller did
        self.wait_exit(5)

    def _signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)  # the group start_server created (start_new_session)


def start_server(
    model: str | Path | None = None,
    host: str | None = LOOPBACK,
    port: int | None = None,
    *,
    extra: Sequence[str] = (),
    log_path: Path | None = None,
    api_key: str | None = None,
    env: Mapping[str, str] | None = None,
) -> ServerProcess:
    """Start the node (a free port unless given) without waiting for it. Without a host it
    binds where the node does by default, and is reached on loopback.

    Output goes to `log_path`, appended, so a restart on the same file keeps the first run's
    lines; without one it goes where this process's output goes."""
    port = free_port() if port is None else port
    cmd = serve_command(model, host, port, [*(["--api-key", api_key] if api_key else []), *extra])
    full_env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        **(env or {}),
    }
    out = open(log_path, "ab") if log_path is not None else None  # noqa: SIM115
    try:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT if out else None,
            env=full_env,
            start_new_session=True,
        )
    finally:
        if out is not None:
            out.close()  # the child holds its own descriptor
    return ServerProcess(proc, port, log_path, api_key, host or LOOPBACK)


@contextlib.contextmanager
def running_server(
    model: str | Path | None = None,
    host: str | None = LOOPBACK,
    port: int | None = None,
    *,
    extra: Sequence[str] = (),
    log_path: Path | None = None,
    api_key: str | None = None,
    env: Mapping[str, str] | None = None,
    start_timeout_s: float = START_TIMEOUT_S,
    stop_grace_s: float = STOP_GRACE_S,
) -> Iterator[ServerProcess]:
    """A healthy node for the `with` block; always taken down afterwards."""
    server = start_server(
        model, host, port, extra=extra, log_path=log_path, api_key=api_key, env=env
    )
    try:
        server.wait_healthy(start_timeout_s)
        yield server
    finally:
        server.stop(stop_grace_s)


@contextlib.contextmanager
def run_server(
    model_path: str | Path | None,
    tmp_path: Path,
    *args: str,
    api_key: str | None = None,
    env: dict[str, str] | None = None,
    host: str | None = LOOPBACK,
) -> Iterator[ServerProcess]:
    """`running_server` on a free port with its log in `tmp_path` (the tests' form)."""
    port = free_port()
    log_path = tmp_path / f"server-{port}.log"
    with running_server(
        model_path, host, port, extra=args, log_path=log_path, api_key=api_key, env=env
    ) as server:
        yield server
