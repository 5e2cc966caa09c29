from __future__ import annotations

import pytest

from tests.server_process import run_server
from tests.tiny_checkpoints import make_llama


@pytest.fixture(scope="module")
def llama_path():
    return make_llama()


@pytest.fixture(scope="module")
def server(llama_path, tmp_path_factory):
    """One live node on the tiny Llama for a whole test module."""
    tmp = tmp_path_factory.mktemp("server")
    with run_server(
        llama_path, tmp, "--max-total-tokens", "4096", "--max-running-requests", "16"
    ) as s:
        yield s


def idle_state(client) -> dict:
    info = client.get("/get_server_info").json()
    return {"pending": info["num_pending_requests"], "kv_used": info["kv_pool"]["used"]}


def running_reqs(client) -> int:
    """Requests the scheduler is running now (a sync httpx client of the node)."""
    return client.get("/get_server_info").json()["internal_states"][0]["num_running_reqs"]
