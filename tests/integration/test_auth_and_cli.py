"""`--api-key` guards every route but the health checks, walked from the app's own route table so
that a new route is covered by being registered; a node binds loopback unless told otherwise; the
CLI writes the demo checkpoint."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any
from unittest.mock import MagicMock

import httpx
import psutil
import pytest
import websockets.sync.client
from starlette.routing import BaseRoute, Route, WebSocketRoute
from websockets.exceptions import InvalidStatus

from tests.support.server import ServerProcess, run_server
from vla_server.config import FrontendConfig, ServerArgs
from vla_server.frontend.auth import OPEN_PATHS
from vla_server.frontend.http_server import create_app
from vla_server.policies.llava.demo import demo_model_path

websocket_client_policy = pytest.importorskip("openpi_client.websocket_client_policy")

# openpi-client 0.1.2 calls websockets' sync connect() the pre-v14 way; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore:connect\\(\\) must be used:DeprecationWarning")

KEY = "s3cret"
# README: "`--api-key KEY` requires `Authorization: Bearer KEY` on everything except `/health`
# and `/healthz`".
DOCUMENTED_OPEN_PATHS = {"/health", "/healthz"}
# Each way of not having the key: none, a wrong one, the right one without a scheme, and over
# HTTP the right one in the scheme only the WebSocket takes (openpi-client's).
NO_KEY: dict[str, dict[str, str]] = {
    "none": {},
    "wrong": {"Authorization": "Bearer nope"},
    "bare": {"Authorization": KEY},
    "api-key-scheme": {"Authorization": f"Api-Key {KEY}"},
}
WS_NO_KEY: dict[str, dict[str, str]] = {
    "none": {},
    "wrong": {"Authorization": "Bearer nope"},
    "bare": {"Authorization": KEY},
    "wrong-api-key": {"Authorization": "Api-Key nope"},
}
# A body no route accepts, so that the walk with the key changes nothing (no pause, no session).
INVALID_BODY = b"[]"


class _RouteTableOnly:
    """Enough of a node for `create_app` to register its routes; nothing is served from it."""

    def __init__(self, config: FrontendConfig):
        self.config = config
        self.tokenizer_manager = MagicMock()
        self.scheduler_info: dict[str, Any] = {}

    def arguments(self) -> dict[str, Any]:
        return {}

    def shutdown(self) -> None:
        pass


def _route_table() -> list[BaseRoute]:
    config = ServerArgs(model_path="route-table-only", api_key=KEY).configs().frontend
    return list(create_app(_RouteTableOnly(config)).routes)


ROUTES = _route_table()
HTTP_ROUTES = sorted(
    (method, r.path) for r in ROUTES if isinstance(r, Route) for method in r.methods
)
WS_PATHS = sorted(r.path for r in ROUTES if isinstance(r, WebSocketRoute))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # No --host: the node's default bind is under test too.
    with run_server(None, tmp_path_factory.mktemp("server"), api_key=KEY, host=None) as s:
        yield s


def _request(
    server: ServerProcess, method: str, path: str, headers: dict[str, str]
) -> httpx.Response:
    body = INVALID_BODY if method in ("POST", "PUT", "PATCH") else None
    with httpx.Client(base_url=server.url, timeout=120) as c:
        return c.request(method, path, headers=headers, content=body)


def _refused(r: httpx.Response, method: str) -> bool:
    """401 with the JSON error naming `authorization` (a HEAD answer has no body to read)."""
    if r.status_code != 401:
        return False
    return method == "HEAD" or r.json()["error"]["field"] == "authorization"


def test_the_rule_is_the_documented_one_and_every_route_is_walked():
    assert OPEN_PATHS == DOCUMENTED_OPEN_PATHS
    assert {path for _, path in HTTP_ROUTES} >= OPEN_PATHS, "an open path that is no route"
    # A kind of route the walk does not know (a Mount, say) must not go unwalked.
    assert all(isinstance(r, Route | WebSocketRoute) for r in ROUTES), ROUTES
    assert "/" in WS_PATHS  # the openpi policy


@pytest.mark.parametrize("headers", NO_KEY.values(), ids=NO_KEY.keys())
def test_without_the_key_only_the_health_checks_answer(server, headers):
    wrong = []
    for method, path in HTTP_ROUTES:
        r = _request(server, method, path, headers)
        if not (r.status_code == 200 if path in OPEN_PATHS else _refused(r, method)):
            wrong.append(f"{method} {path}: {r.status_code} {r.text[:200]}")
    assert wrong == []


def test_with_the_key_every_route_is_let_through(server):
    headers = {"Authorization": f"Bearer {KEY}"}
    wrong = []
    for method, path in HTTP_ROUTES:
        r = _request(server, method, path, headers)
        if r.status_code in (401, 403):
            wrong.append(f"{method} {path}: {r.status_code} {r.text[:200]}")
    assert wrong == []
    with server.client() as c:
        assert c.get("/get_server_info").json()["api_key"] == "***"


@pytest.mark.parametrize("headers", WS_NO_KEY.values(), ids=WS_NO_KEY.keys())
def test_a_websocket_without_the_key_is_refused(server, headers):
    for path in WS_PATHS:
        uri = f"ws://127.0.0.1:{server.port}{path}"
        with pytest.raises(InvalidStatus) as refused:
            websockets.sync.client.connect(uri, additional_headers=headers)
        assert refused.value.response.status_code == 403, path  # see auth.py for why not 401
    assert "ERROR" not in server.log()


@pytest.mark.parametrize("scheme", ["Bearer", "Api-Key"])
def test_a_websocket_with_the_key_connects(server, scheme):
    for path in WS_PATHS:
        uri = f"ws://127.0.0.1:{server.port}{path}"
        headers = {"Authorization": f"{scheme} {KEY}"}
        with websockets.sync.client.connect(uri, additional_headers=headers):
            pass  # the handshake was accepted


def test_openpi_client_needs_its_api_key(server):
    with pytest.raises(InvalidStatus) as refused:
        websocket_client_policy.WebsocketClientPolicy("127.0.0.1", server.port)
    assert refused.value.response.status_code == 403
    policy = websocket_client_policy.WebsocketClientPolicy("127.0.0.1", server.port, api_key=KEY)
    try:
        assert policy.get_server_metadata()["server"] == "vla-server"
        assert policy.get_server_metadata()["model"] == demo_model_path().name
    finally:
        policy._ws.close()  # openpi-client has no close() of its own


def test_a_node_without_host_listens_on_loopback_only(server):
    assert "--host" not in server.proc.args
    procs = [psutil.Process(server.proc.pid), *server.node_children()]
    listening = [
        conn
        for proc in procs
        for conn in proc.net_connections(kind="inet")
        if conn.status == psutil.CONN_LISTEN
    ]
    assert server.port in {conn.laddr.port for conn in listening}
    assert {conn.laddr.ip for conn in listening} == {"127.0.0.1"}


def _digest(folder) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_make_demo_model_cli_is_deterministic(tmp_path):
    for name in ("a", "b"):
        subprocess.run(
            [
                sys.executable,
                "-m",
                "vla_server.entrypoints.cli",
                "make-demo-model",
                str(tmp_path / name),
            ],
            check=True,
            capture_output=True,
            timeout=300,
        )
    a, b = _digest(tmp_path / "a"), _digest(tmp_path / "b")
    assert a == b
    assert {"config.json", "model.safetensors", "tokenizer.json", "action_tokenizer.json"} <= set(a)
