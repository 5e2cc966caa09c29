"""A fleet on one machine: N nodes on free loopback ports behind sglang-router.

    python -m vla_server.fleet --nodes 2 --port 30000 [--policy cache_aware] -- [node flags]

starts the nodes (`vla-server serve`, each with the node flags after `--`, e.g.
`--default-num-actions 8 --default-unnorm-key bridge_orig`), waits until they are healthy,
then starts `python -m sglang_router.launch_router` on `--port` in front of them, and stops
everything on Ctrl-C (or SIGTERM). Everything binds to 127.0.0.1, the router's Prometheus
port included (its default would be 0.0.0.0:29000). The router is SGLang's own
(`pip install sglang-router==0.3.2`); this module only starts and stops processes.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from vla_harness.server_subprocess import (
    LOOPBACK,
    START_TIMEOUT_S,
    ServerProcess,
    free_port,
    running_server,
)

ROUTER_START_TIMEOUT_S = 60.0
POLICIES = ("cache_aware", "round_robin", "random", "power_of_two")


def router_command(
    worker_urls: Sequence[str],
    port: int,
    prometheus_port: int,
    policy: str = "cache_aware",
    extra: Sequence[str] = (),
) -> list[str]:
    """sglang-router 0.3.2's launcher, loopback only."""
    return [
        sys.executable,
        "-m",
        "sglang_router.launch_router",
        "--worker-urls",
        *worker_urls,
        "--host",
        LOOPBACK,
        "--port",
        str(port),
        "--prometheus-host",
        LOOPBACK,
        "--prometheus-port",
        str(prometheus_port),
        "--policy",
        policy,
        *extra,
    ]


@dataclass
class RouterProcess:
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path | None = None

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def log(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")

    def wait_workers(self, n: int, timeout_s: float = ROUTER_START_TIMEOUT_S) -> None:
        """Until the router reports `n` healthy workers (each registered: its model and
        server info read, its tokenizer loaded)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log()[-4000:]
                raise RuntimeError(f"router exited with {self.proc.returncode}:\n{tail}")
            if self.healthy_workers() == n:
                return
            time.sleep(0.25)
        raise RuntimeError(f"router has no {n} healthy workers in {timeout_s:.0f} s")

    def healthy_workers(self) -> int:
        with contextlib.suppress(httpx.HTTPError, ValueError):
            r = httpx.get(self.url + "/workers", timeout=2.0)
            if r.status_code == 200:
                return sum(bool(w.get("is_healthy")) for w in r.json().get("workers", []))
        return 0

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)


@contextlib.contextmanager
def running_router(
    worker_urls: Sequence[str],
    port: int | None = None,
    policy: str = "cache_aware",
    *,
    extra: Sequence[str] = (),
    log_path: Path | None = None,
) -> Iterator[RouterProcess]:
    """sglang-router in front of `worker_urls`, ready, for the `with` block; always stopped."""
    port = free_port() if port is None else port
    cmd = router_command(worker_urls, port, free_port(), policy, extra)
    out = open(log_path, "ab") if log_path is not None else None  # noqa: SIM115
    try:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT if out else None, start_new_session=True
        )
    finally:
        if out is not None:
            out.close()
    router = RouterProcess(proc, port, log_path)
    try:
        router.wait_workers(len(worker_urls))
        yield router
    finally:
        router.stop()


@dataclass
class Fleet:
    nodes: list[ServerProcess]
    router: RouterProcess
    logs: list[Path] = field(default_factory=list)


@contextlib.contextmanager
def running_fleet(
    n_nodes: int,
    model: str | Path | None = None,
    node_flags: Sequence[str] = (),
    *,
    port: int | None = None,
    policy: str = "cache_aware",
    router_flags: Sequence[str] = (),
    log_dir: Path | None = None,
) -> Iterator[Fleet]:
    """`n_nodes` healthy nodes behind a ready router; all stopped afterwards, in any case."""
    with contextlib.ExitStack() as stack:
        nodes = []
        for i in range(n_nodes):
            log = log_dir / f"node-{i}.log" if log_dir else None
            ctx = running_server(model, extra=node_flags, log_path=log)
            nodes.append(stack.enter_context(ctx))
        urls = [n.url for n in nodes]
        log = log_dir / "router.log" if log_dir else None
        router = stack.enter_context(
            running_router(urls, port, policy, extra=router_flags, log_path=log)
        )
        yield Fleet(nodes, router)


def _parse(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    node_flags: list[str] = []
    if "--" in argv:
        i = list(argv).index("--")
        argv, node_flags = argv[:i], list(argv[i + 1 :])
    p = argparse.ArgumentParser(
        prog="python -m vla_server.fleet", description=__doc__.split("\n")[0]
    )
    p.add_argument("--nodes", type=int, default=2, help="nodes to start on this machine")
    p.add_argument("--model-path", default=None, help="checkpoint (default: the demo VLA)")
    p.add_argument("--port", type=int, default=30000, help="the router's port")
    p.add_argument("--policy", default="cache_aware", choices=POLICIES)
    p.add_argument("--log-dir", type=Path, default=None, help="node-i.log, router.log here")
    return p.parse_args(argv), node_flags


def main(argv: Sequence[str] | None = None) -> None:
    args, node_flags = _parse(sys.argv[1:] if argv is None else argv)
    if args.log_dir:
        args.log_dir.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(f"starting {args.nodes} node(s) (up to {START_TIMEOUT_S:.0f} s each) ...", flush=True)
    try:
        with running_fleet(
            args.nodes,
            args.model_path,
            node_flags,
            port=args.port,
            policy=args.policy,
            log_dir=args.log_dir,
        ) as fleet:
            for node in fleet.nodes:
                print(f"node    {node.url}", flush=True)
            print(
                f"router  {fleet.router.url}  (policy {args.policy}); Ctrl-C stops all", flush=True
            )
            stop.wait()
    except KeyboardInterrupt:
        pass
    print("fleet stopped", flush=True)


if __name__ == "__main__":
    main()
