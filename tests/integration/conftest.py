from __future__ import annotations

import pytest

from tests.support.server import module_server
from tests.support.tiny_checkpoints import make_llama


@pytest.fixture(scope="module")
def llama_path():
    return make_llama()


# One live node on the tiny Llama for a whole test module.
server = module_server(make_llama, "--max-total-tokens", "4096", "--max-running-requests", "16")
