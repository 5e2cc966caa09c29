"""CPU time of the node's processes, split by thread, and of the benchmark client itself: where a
token's cost goes when the served loop is slower than the model alone.

On a machine with few cores every process of the token path (scheduler, detokenizer, HTTP
front end, the client reading the stream) competes for the same cores, and inside the scheduler
the event-loop thread and the model worker thread share one GIL, so their CPU time per token is
the profile that explains a served ITL above the bare forward.
"""

from __future__ import annotations

import os

import psutil

from vla_harness.server_subprocess import ServerProcess

CLIENT = "bench client"


def cpu_snapshot(server: ServerProcess) -> dict[str, float]:
    """Cumulative CPU seconds (user + system) per node process and thread group, and the
    client's."""
    times = os.times()
    out = {CLIENT: times.user + times.system}
    procs = {"main": server.proc.pid, **{p.name(): p.pid for p in server.node_children()}}
    for name, pid in procs.items():
        for thread in psutil.Process(pid).threads():
            label = f"{name}: {_thread_kind(pid, thread.id)}"
            out[label] = out.get(label, 0.0) + thread.user_time + thread.system_time
    return out


def _thread_kind(pid: int, tid: int) -> str:
    if tid == pid:
        return "main thread"
    try:
        with open(f"/proc/{pid}/task/{tid}/comm") as f:
            comm = f.read().strip()
    except OSError:  # the thread ended between listing and reading
        return "other threads"
    # ZMQ names its background threads; Python threads keep the process's name.
    return "ZMQ I/O threads" if comm.startswith("ZMQbg") else "other threads"


def cpu_ms_per_unit(
    before: dict[str, float], after: dict[str, float], units: int
) -> dict[str, float]:
    """CPU milliseconds per unit (e.g. per generated token) spent between two snapshots."""
    spent = {k: (after[k] - before.get(k, 0.0)) * 1000.0 / max(units, 1) for k in after}
    spent["total"] = sum(spent.values())
    return spent


def by_process(snapshot: dict[str, float]) -> dict[str, float]:
    """A snapshot's CPU seconds per process (the client, each node process), threads summed."""
    out: dict[str, float] = {}
    for label, cpu_s in snapshot.items():
        process = label.split(":")[0]
        out[process] = out.get(process, 0.0) + cpu_s
    return out


def cores_by_process(
    before: dict[str, float], after: dict[str, float], seconds: float
) -> dict[str, float]:
    """Average cores each process kept busy between two snapshots `seconds` apart, and in
    total: on a machine with few cores, the share left for the model."""
    was = by_process(before)
    busy = {p: (cpu_s - was.get(p, 0.0)) / seconds for p, cpu_s in by_process(after).items()}
    busy["total"] = sum(busy.values())
    return busy
