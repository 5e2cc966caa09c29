from __future__ import annotations

import pytest

# idle_state and running_reqs are re-exported until the scheduler tests import them from
# tests.helpers.server; otherwise this file holds only fixtures.
from tests.helpers.server import idle_state, module_server, running_reqs  # noqa: F401
from tests.tiny_checkpoints import make_llama


@pytest.fixture(scope="module")
def llama_path():
    return make_llama()


# One live node on the tiny Llama for a whole test module.
server = module_server(make_llama, "--max-total-tokens", "4096", "--max-running-requests", "16")
