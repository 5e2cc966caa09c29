"""A node killed outright leaves its ipc directory; the next node to start removes it.

The nodes get a temp directory of their own (TMPDIR), so the directories of other nodes running
on this machine are neither seen nor touched."""

from __future__ import annotations

import stat

from tests.support.server import run_server


def test_the_next_node_removes_a_killed_nodes_ipc_dir(tmp_path_factory):
    temp_root = tmp_path_factory.mktemp("tmp")
    logs = tmp_path_factory.mktemp("logs")
    env = {"TMPDIR": str(temp_root)}
    with run_server(None, logs, env=env) as first:
        first_dir = first.ipc_dir()
        assert first_dir.parent == temp_root
        first.kill()
    assert first_dir.is_dir(), "SIGKILL gives the node no chance to clean up"
    with run_server(None, logs, env=env) as second:
        assert not first_dir.exists()
        second_dir = second.ipc_dir()
        assert second_dir.parent == temp_root
        assert stat.S_IMODE(second_dir.stat().st_mode) == 0o700
        assert "removed 1 stale ipc directories" in second.log()
    assert not second_dir.exists(), "a normal stop removes the node's own directory"
    assert list(temp_root.glob("vla-server-*")) == []
