"""A node's private ipc directory, and removing those that killed nodes left behind.

The directory's name records its owner, the process that made it:
`vla-server-<pid>-<start ms>-<random>`, with the owner's start time so that a reused pid is not
mistaken for the owner. The start time counts from boot, not from the epoch: a clock step (a
robot's computer setting its clock from NTP after boot) moves a wall-clock start time and would
make a live owner look like another process. The name is written by `mkdtemp` itself, so there
is no moment at which a directory exists without its owner. A normal exit removes the directory
(`PortArgs.cleanup`); one killed outright cannot, so each node start removes the directories of
owners that are gone.

Only what this module would have made is removed: a real directory (not a link) of this user,
mode 0700, named as above, holding nothing but the node's sockets. Anything else in the temp
directory, and any directory whose owner is alive or cannot be inspected, is left alone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import stat
import tempfile
from pathlib import Path

import psutil

logger = logging.getLogger(__name__)

PREFIX = "vla-server-"
SOCKET_NAMES = frozenset({"tokenizer", "scheduler_input", "detokenizer", "rpc"})
_NAME = re.compile(rf"{PREFIX}(\d+)-(\d+)-[a-z0-9_]+")
# psutil reads the boot time twice for one start time (inside create_time and here), so a
# clock step between the reads moves it: within this much, the process is taken to be the owner.
# Erring that way only keeps a directory; the other way would delete a live node's sockets.
START_TOLERANCE_MS = 1000


def start_ms(proc: psutil.Process) -> int:
    """When `proc` started, in ms since boot (the kernel's tick count: no clock step moves it)."""
    return round((proc.create_time() - psutil.boot_time()) * 1000)


def make_ipc_dir(root: str | None = None) -> str:
    """Remove stale directories under `root` (default: the temp directory), then make this
    process's own, mode 0700."""
    root = root or tempfile.gettempdir()
    removed = remove_stale(root)
    if removed:
        logger.info("removed %d stale ipc directories (owner gone) from %s", removed, root)
    me = psutil.Process()
    path = tempfile.mkdtemp(prefix=f"{PREFIX}{me.pid}-{start_ms(me)}-", dir=root)
    os.chmod(path, 0o700)  # mkdtemp's 0700 is masked by the umask; the owner needs all three
    return path


def owner_alive(pid: int, started_ms: int) -> bool:
    """Whether process `pid`, started at `started_ms`, still runs (unknown counts as alive)."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False  # exited; its sockets are closed, only its exit status waits
        return abs(start_ms(proc) - started_ms) <= START_TOLERANCE_MS
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True


def _ours(path: Path) -> bool:
    """A directory made by `make_ipc_dir` for this user, holding at most the node's sockets."""
    st = path.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        return False
    if stat.S_IMODE(st.st_mode) != 0o700:
        return False
    return all(
        child.name in SOCKET_NAMES and stat.S_ISSOCK(child.lstat().st_mode)
        for child in path.iterdir()
    )


def is_stale(path: Path) -> bool:
    match = _NAME.fullmatch(path.name)
    if match is None:
        return False
    try:
        if not _ours(path):
            return False
    except OSError:
        return False  # gone meanwhile (another node's sweep), or unreadable: not ours to judge
    return not owner_alive(int(match[1]), int(match[2]))


def _remove(path: Path) -> bool:
    """Unlink the sockets, then the directory; False if another sweep removed it first or
    something else appeared in it (then it stays)."""
    for name in SOCKET_NAMES:
        with contextlib.suppress(FileNotFoundError):
            (path / name).unlink()
    try:
        path.rmdir()
    except OSError:
        return False
    return True


def remove_stale(root: str) -> int:
    """Remove the ipc directories under `root` whose owner is gone; how many were removed."""
    stale = [p for p in Path(root).glob(f"{PREFIX}*") if is_stale(p)]
    return sum(_remove(p) for p in stale)
