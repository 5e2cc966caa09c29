"""Tests start servers through the package's own helper."""

from vla_server.server_subprocess import ServerProcess, free_port, run_server

__all__ = ["ServerProcess", "free_port", "run_server"]
