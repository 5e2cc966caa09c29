"""The node as processes: three of them, a dead child takes the node down, SIGTERM and SIGINT
drain in-flight requests and exit 0 leaving nothing behind, and nothing on a socket is ever
unpickled."""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
import pickle
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
import zmq

from tests.support.server import ServerProcess, run_server, running_reqs
from vla_server.entrypoints.engine import StartupError, wait_for_ready

ARGS = ("--max-total-tokens", "2048")


TRACKER_CMD = "from multiprocessing.resource_tracker import main"


def _node_processes(server: ServerProcess) -> list[psutil.Process]:
    """The main process and every descendant of it but Python's resource tracker.

    The tracker is not a node process: multiprocessing's spawn start method (the one the node
    uses, as torch and zmq threads rule out fork) launches it with the first child, to clean
    up semaphores a child leaves behind. It is recognised by its command line, and there must be
    exactly one, a direct child of the main process, so that it cannot hide anything else.
    """
    main = psutil.Process(server.proc.pid)
    kids = main.children(recursive=True)
    trackers = [k for k in kids if TRACKER_CMD in " ".join(k.cmdline())]
    assert len(trackers) == 1 and trackers[0].ppid() == main.pid, trackers
    return [main, *(k for k in kids if k not in trackers)]


def _all_processes(server: ServerProcess) -> list[psutil.Process]:
    """The main process and all its descendants, the resource tracker too: none may survive."""
    main = psutil.Process(server.proc.pid)
    return [main, *main.children(recursive=True)]


def _assert_left_nothing(everyone: list[psutil.Process], ipc_dir: Path) -> None:
    _, alive = psutil.wait_procs(everyone, timeout=5)
    assert not alive, f"left behind: {alive}"
    assert not ipc_dir.exists()


def test_exactly_three_processes_and_sigterm_leaves_nothing(llama_path, tmp_path):
    with run_server(llama_path, tmp_path, *ARGS) as server:
        # /health answers once the scheduler and the detokenizer both reported ready (their
        # sockets bound): the ipc files are all there before any request.
        procs = _node_processes(server)
        main, children = procs[0], procs[1:]
        assert "vla_server.entrypoints.cli" in " ".join(main.cmdline())
        # a list, not a set: a second scheduler or detokenizer must fail this
        assert sorted(p.name() for p in children) == ["vla-detokenizer", "vla-scheduler"]
        assert all(p.ppid() == main.pid for p in children), "a child started a process"
        assert len(procs) == 3
        ipc_dir = server.ipc_dir()
        assert ipc_dir.stat().st_mode & 0o777 == 0o700
        assert sorted(p.name for p in ipc_dir.iterdir()) == [
            "detokenizer",
            "rpc",
            "scheduler_input",
            "tokenizer",
        ]
        everyone = _all_processes(server)
        server.proc.send_signal(signal.SIGTERM)
        assert server.wait_exit(15) == 0, "SIGTERM should stop an idle node with exit code 0"
        _assert_left_nothing(everyone, ipc_dir)


DRAIN_TOKENS = 480  # long enough to be mid-stream when the signal lands, within the context


def _stream_body() -> dict:
    sampling = {"max_new_tokens": DRAIN_TOKENS, "temperature": 0, "ignore_eos": True}
    return {"input_ids": [85, 289], "stream": True, "sampling_params": sampling}


def _read_events(lines: Iterator[str]) -> tuple[list[dict], bool]:
    """The SSE chunks and whether `[DONE]` came; a connection cut mid-body ends the list."""
    chunks, done = [], False
    with contextlib.suppress(httpx.RemoteProtocolError, httpx.ReadError):
        for line in lines:
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: "):
                chunks.append(json.loads(line[len("data: ") :]))
    return chunks, done


@contextlib.contextmanager
def _node_streaming(
    llama_path: Path, tmp_path: Path, grace_s: float
) -> Iterator[tuple[ServerProcess, Iterator[str], dict[str, Any]]]:
    """A node with --graceful-shutdown-timeout `grace_s` and a stream on it that has sent its
    first chunk: (server, the stream's remaining lines, that chunk)."""
    grace = ["--graceful-shutdown-timeout", str(grace_s)]
    with (
        run_server(llama_path, tmp_path, *ARGS, *grace) as server,
        server.client() as c,
        c.stream("POST", "/generate", json=_stream_body()) as r,
    ):
        assert r.status_code == 200
        lines = r.iter_lines()
        first = json.loads(next(line for line in lines if line.startswith("data: "))[6:])
        yield server, lines, first


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "sigint"])
def test_signal_drains_an_inflight_stream_to_its_end_and_exits_0(llama_path, tmp_path, sig):
    """Drain policy: a request in flight when the signal arrives runs to its end (within
    --graceful-shutdown-timeout, generous here), then the node stops and exits 0."""
    with _node_streaming(llama_path, tmp_path, grace_s=300) as (server, lines, first):
        everyone, ipc_dir = _all_processes(server), server.ipc_dir()
        with server.client() as ctl:
            assert running_reqs(ctl) == 1, "the request ended before the signal"
        server.proc.send_signal(sig)
        chunks, done = _read_events(lines)
        # Inside the block: leaving it stops the node, whose SIGTERM could land while the
        # interpreter finalises (handlers back to the default: exit -15).
        code = server.wait_exit(60)
    chunks.insert(0, first)
    assert done, "the stream was cut instead of drained"
    assert chunks[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": DRAIN_TOKENS}
    # SGLang's stream: every chunk carries the ids so far, each extending the one before.
    assert len(chunks[-1]["output_ids"]) == DRAIN_TOKENS
    for a, b in zip(chunks, chunks[1:], strict=False):
        assert b["output_ids"][: len(a["output_ids"])] == a["output_ids"]
    assert code == 0
    _assert_left_nothing(everyone, ipc_dir)
    assert "node stopped" in server.log()


def test_signal_aborts_a_stream_still_running_after_the_grace_period(llama_path, tmp_path):
    """A request that cannot finish within --graceful-shutdown-timeout (generation is paused
    here) is cut off: its stream ends without a final chunk or [DONE]; the exit is still 0."""
    with _node_streaming(llama_path, tmp_path, grace_s=1) as (server, lines, _):
        everyone, ipc_dir = _all_processes(server), server.ipc_dir()
        with server.client() as ctl:
            assert ctl.post("/pause_generation", json={"mode": "in_place"}).json()["success"]
        server.proc.send_signal(signal.SIGTERM)
        chunks, done = _read_events(lines)
        code = server.wait_exit(60)  # inside the block, as above
    assert not done
    assert all(ch["meta_info"]["finish_reason"] is None for ch in chunks)
    assert code == 0
    _assert_left_nothing(everyone, ipc_dir)


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


# Every ipc endpoint of the node: a socket type its binder accepts as a peer, and the channel
# name its receiver logs a dropped frame under. The rpc endpoint is a DEALER bound by the
# TokenizerManager (the scheduler connects the other DEALER).
ENDPOINTS = {
    "scheduler_input": (zmq.PUSH, "scheduler"),
    "detokenizer": (zmq.PUSH, "detokenizer"),
    "tokenizer": (zmq.PUSH, "tokenizer"),
    "rpc": (zmq.DEALER, "rpc"),
}


def _dropped_on_every_endpoint(log: str) -> bool:
    return all(
        f"dropped a malformed message on the {channel} socket" in log
        for _, channel in ENDPOINTS.values()
    )


def test_pickle_payloads_are_rejected_not_executed(llama_path, tmp_path):
    marker = tmp_path / "unpickled"
    with run_server(llama_path, tmp_path, *ARGS) as server:
        ipc_dir = server.ipc_dir()
        ctx = zmq.Context()
        try:
            for name, (kind, _) in ENDPOINTS.items():
                sock = ctx.socket(kind)
                sock.setsockopt(zmq.LINGER, 1000)
                sock.connect(f"ipc://{ipc_dir / name}")
                sock.send(pickle.dumps(_Exploit(marker)))
                sock.close()
        finally:
            ctx.term()
        with server.client() as c:
            deadline = time.monotonic() + 10
            while not _dropped_on_every_endpoint(server.log()):
                assert time.monotonic() < deadline, server.log_tail()
                time.sleep(0.05)
            r = c.post("/generate", json={"text": "pick", "sampling_params": {"max_new_tokens": 4}})
            assert r.status_code == 200
            # the control plane still answers: the rpc channel survived its bad frame
            assert c.get("/get_server_info").status_code == 200
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
        wait_for_ready({child: reader})
