"""Old home of the server helpers, kept until the scheduler tests import `tests.helpers.server`."""

from tests.helpers.server import ServerProcess, free_port, run_server

__all__ = ["ServerProcess", "free_port", "run_server"]
