"""The ipc directory's owner record and the sweep of those that killed nodes left behind, on
fake directories under a private temp root."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from vla_server import ipc_dir
from vla_server.ipc_dir import SOCKET_NAMES, make_ipc_dir, owner_alive, remove_stale, start_ms

DEADLINE_S = 60.0


def _fake_dir(
    root: Path, pid: int, started_ms: int, mode: int = 0o700, tag: str = "abc_123x"
) -> Path:
    """A directory as a node leaves it: owner in the name, its four sockets inside."""
    path = root / f"vla-server-{pid}-{started_ms}-{tag}"
    path.mkdir()
    for name in SOCKET_NAMES:
        os.mknod(path / name, stat.S_IFSOCK | 0o600)
    path.chmod(mode)
    return path


def _tree(root: Path) -> list[str]:
    """Every path under `root`, without following links."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _waiting_child() -> subprocess.Popen[bytes]:
    """A process that runs until its stdin is closed."""
    code = "import sys; sys.stdin.read()"
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)


@pytest.fixture
def dead_owner() -> tuple[int, int]:
    """The pid and start time of a process that has exited and been reaped."""
    child = _waiting_child()
    owner = (child.pid, start_ms(psutil.Process(child.pid)))
    assert child.stdin is not None
    child.stdin.close()
    child.wait(DEADLINE_S)
    return owner


@pytest.fixture
def live_child() -> Iterator[psutil.Process]:
    child = _waiting_child()
    yield psutil.Process(child.pid)
    assert child.stdin is not None
    child.stdin.close()
    child.wait(DEADLINE_S)


def test_a_dead_owners_directory_is_removed_and_counted(tmp_path, dead_owner, caplog):
    stale = [_fake_dir(tmp_path, *dead_owner), _fake_dir(tmp_path, dead_owner[0], 1)]
    with caplog.at_level(logging.INFO, logger=ipc_dir.__name__):
        made = Path(make_ipc_dir(str(tmp_path)))
    assert not any(p.exists() for p in stale)
    assert list(tmp_path.iterdir()) == [made]
    assert "removed 2 stale ipc directories" in caplog.text


def test_a_live_owners_directory_stays(tmp_path, live_child):
    mine = Path(make_ipc_dir(str(tmp_path)))
    theirs = _fake_dir(tmp_path, live_child.pid, start_ms(live_child))
    assert remove_stale(str(tmp_path)) == 0
    assert mine.is_dir() and theirs.is_dir()
    assert {p.name for p in theirs.iterdir()} == SOCKET_NAMES


def test_a_reused_pid_is_not_the_owner(tmp_path, live_child):
    """The pid runs, but its process is not the one that made the directory: that one started
    an hour later (after a reboot, say)."""
    other_start = start_ms(live_child) + 3_600_000
    reused = _fake_dir(tmp_path, live_child.pid, other_start)
    assert not owner_alive(live_child.pid, other_start)
    assert remove_stale(str(tmp_path)) == 1
    assert not reused.exists()


def test_an_exited_but_unreaped_owner_is_gone(tmp_path):
    child = _waiting_child()
    proc = psutil.Process(child.pid)
    stale = _fake_dir(tmp_path, proc.pid, start_ms(proc))
    assert child.stdin is not None
    child.stdin.close()
    deadline = time.monotonic() + DEADLINE_S
    while proc.status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert proc.status() == psutil.STATUS_ZOMBIE
        assert remove_stale(str(tmp_path)) == 1
        assert not stale.exists()
    finally:
        child.wait(DEADLINE_S)


def test_an_owner_that_cannot_be_inspected_counts_as_alive(monkeypatch, dead_owner):
    def denied(pid: int) -> psutil.Process:
        raise psutil.AccessDenied(pid)

    monkeypatch.setattr(psutil, "Process", denied)
    assert owner_alive(*dead_owner)


def test_what_we_did_not_make_is_left_alone(tmp_path, dead_owner):
    pid, started = dead_owner
    unrelated = tmp_path / "vla-server-abc"  # an older node's name, or anyone's
    unrelated.mkdir(mode=0o700)
    extra_file = _fake_dir(tmp_path, pid, started, tag="extraxxx")
    (extra_file / "notes.txt").write_text("not ours")
    extra_socket = _fake_dir(tmp_path, pid, started, tag="socketxx")
    os.mknod(extra_socket / "someone_elses", stat.S_IFSOCK | 0o600)
    _fake_dir(tmp_path, pid, started, mode=0o755, tag="modexxxx")  # a node's is 0700
    not_a_socket = _fake_dir(tmp_path, pid, started, tag="regularx")
    (not_a_socket / "rpc").unlink()
    (not_a_socket / "rpc").write_text("")
    a_file = tmp_path / f"vla-server-{pid}-{started}-filexxxx"
    a_file.write_text("")
    (tmp_path / "elsewhere").mkdir()
    target = _fake_dir(tmp_path / "elsewhere", pid, started)
    link = tmp_path / f"vla-server-{pid}-{started}-linkxxxx"
    link.symlink_to(target, target_is_directory=True)
    before = _tree(tmp_path)
    assert remove_stale(str(tmp_path)) == 0
    assert _tree(tmp_path) == before


def test_another_users_directory_is_left_alone(tmp_path, dead_owner, monkeypatch):
    theirs = _fake_dir(tmp_path, *dead_owner)
    monkeypatch.setattr(os, "getuid", lambda: theirs.stat().st_uid + 1)
    assert remove_stale(str(tmp_path)) == 0
    assert theirs.is_dir()


@pytest.mark.parametrize("umask", [0o022, 0o277, 0o000])
def test_the_new_directory_is_private_and_names_its_owner(tmp_path, umask):
    old = os.umask(umask)
    try:
        made = Path(make_ipc_dir(str(tmp_path)))
    finally:
        os.umask(old)
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
    assert made.stat().st_uid == os.getuid()
    me = psutil.Process()
    assert made.name.startswith(f"vla-server-{me.pid}-{start_ms(me)}-")
    assert list(made.iterdir()) == []
