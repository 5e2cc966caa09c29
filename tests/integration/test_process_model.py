"""The node as processes: three of them, a dead child takes the node down, SIGTERM leaves
nothing behind, and nothing on a socket is ever unpickled."""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import shutil
import signal
import time
from pathlib import Path

import psutil
import pytest
import zmq

from tests.server_process import run_server
from vla_server.entrypoints.engine import StartupError, wait_for_scheduler_ready

ARGS = ("--max-total-tokens", "2048")


def _names(procs: list[psutil.Process]) -> set[str]:
    return {p.name() for p in procs}


def test_exactly_three_processes_and_sigterm_leaves_nothing(llama_path, tmp_path):
    with run_server(llama_path, tmp_path, *ARGS) as server:
        children = server.node_children()
        assert _names(children) == {"vla-scheduler", "vla-detokenizer"}, _names(children)
        ipc_dir = server.ipc_dir()
        assert ipc_dir.stat().st_mode & 0o777 == 0o700
        assert sorted(p.name for p in ipc_dir.iterdir()) == [
            "detokenizer",
            "rpc",
            "scheduler_input",
            "tokenizer",
        ]
        everyone = [
            psutil.Process(server.proc.pid),
            *psutil.Process(server.proc.pid).children(recursive=True),
        ]
        server.proc.send_signal(signal.SIGTERM)
        code = server.wait_exit(15)
        assert code is not None, "SIGTERM did not stop the node"
        gone, alive = psutil.wait_procs(everyone, timeout=5)
        assert not alive, f"left behind: {alive}"
        assert not ipc_dir.exists()


@pytest.mark.parametrize("victim", ["vla-scheduler", "vla-detokenizer"])
def test_sigkill_of_a_child_brings_the_node_down(llama_path, tmp_path, victim):
    with run_server(llama_path, tmp_path, *ARGS) as server:
        child = next(p for p in server.node_children() if p.name() == victim)
        ipc_dir = server.ipc_dir()
        t0 = time.monotonic()
        child.send_signal(signal.SIGKILL)
        code = server.wait_exit(10)
        elapsed = time.monotonic() - t0
        assert code is not None and code != 0, f"node exit code {code}"
        assert elapsed < 3.0, f"node took {elapsed:.1f}s to go down"
        assert "died with exit code -9" in server.log()
        assert f"{victim.removeprefix('vla-')} process" in server.log()
        assert not ipc_dir.exists()
        print(f"{victim} SIGKILL -> node exit {code} after {elapsed:.2f}s")


class _Exploit:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):  # unpickling this would create the marker file
        return (os.system, (f"touch {self.marker}",))


def test_pickle_payloads_are_rejected_not_executed(llama_path, tmp_path):
    marker = tmp_path / "unpickled"
    with run_server(llama_path, tmp_path, *ARGS) as server:
        ipc_dir = server.ipc_dir()
        ctx = zmq.Context()
        try:
            for name in ("scheduler_input", "detokenizer", "tokenizer"):
                sock = ctx.socket(zmq.PUSH)
                sock.setsockopt(zmq.LINGER, 1000)
                sock.connect(f"ipc://{ipc_dir / name}")
                sock.send(pickle.dumps(_Exploit(marker)))
                sock.close()
        finally:
            ctx.term()
        with server.client() as c:
            deadline = time.monotonic() + 10
            while server.log().count("dropped a malformed message") < 3:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            r = c.post("/generate", json={"text": "pick", "sampling_params": {"max_new_tokens": 4}})
            assert r.status_code == 200
        assert server.proc.poll() is None
    assert not marker.exists()


def test_startup_failure_fails_fast_with_the_reason(llama_path, tmp_path):
    bad = tmp_path / "broken-model"
    shutil.copytree(llama_path, bad)
    (bad / "model.safetensors").write_bytes(b"not a safetensors file")
    with (
        pytest.raises(RuntimeError, match="server exited with 1"),
        run_server(bad, tmp_path, *ARGS),
    ):
        pass
    log = next(tmp_path.glob("server-*.log")).read_text()
    assert "scheduler failed to start" in log


def _die_while_loading(ready_pipe: object, code: int) -> None:
    os._exit(code)  # holds the readiness pipe like the scheduler, dies before writing to it


def test_child_dying_during_startup_reports_its_exit_code():
    ctx = mp.get_context("spawn")
    reader, writer = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_die_while_loading, args=(writer, 3), name="scheduler")
    child.start()
    writer.close()
    with pytest.raises(StartupError, match="exited with code 3"):
        wait_for_scheduler_ready(reader, [child])
