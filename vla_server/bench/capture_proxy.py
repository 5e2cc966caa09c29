"""A recording reverse proxy on loopback: what a third-party client really sends to a node.

Each request is forwarded unchanged to the node and answered with the node's own (streamed)
response; its method, path and JSON body are appended to a JSONL file. The ecosystem benchmark
puts one in front of the node for each tool (SGLang's bench_serving, guidellm, genai-bench) and
one between sglang-router and a node; the captured bodies become the replay test's fixtures.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from vla_harness.server_subprocess import LOOPBACK, free_port

# Hop-by-hop headers (RFC 9110 §7.6.1) and the ones httpx recomputes.
_DROP = {"host", "content-length", "connection", "transfer-encoding", "keep-alive"}


def _record(sink: Path, lock: threading.Lock, request: Request, body: bytes) -> None:
    try:
        payload: Any = json.loads(body) if body else None
    except ValueError:
        payload = {"__raw__": body.decode(errors="replace")}
    line = {"method": request.method, "path": request.url.path, "body": payload}
    if request.url.query:
        line["query"] = request.url.query
    with lock, sink.open("a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


def create_capture_app(upstream: str, sink: Path) -> Starlette:
    client = httpx.AsyncClient(base_url=upstream, timeout=None)
    lock = threading.Lock()

    async def forward(request: Request) -> StreamingResponse:
        body = await request.body()
        _record(sink, lock, request, body)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROP}
        url = httpx.URL(path=request.url.path, query=request.url.query.encode())
        upstream_req = client.build_request(request.method, url, headers=headers, content=body)
        resp = await client.send(upstream_req, stream=True)

        async def chunks() -> AsyncIterator[bytes]:
            async for chunk in resp.aiter_raw():
                yield chunk

        out_headers = {k: v for k, v in resp.headers.items() if k.lower() not in _DROP}
        return StreamingResponse(
            chunks(), resp.status_code, out_headers, background=BackgroundTask(resp.aclose)
        )

    methods = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]
    return Starlette(routes=[Route("/{path:path}", forward, methods=methods)])


@contextlib.contextmanager
def capturing(upstream: str, sink: Path) -> Iterator[str]:
    """A capture proxy in front of `upstream` for the `with` block; yields its URL."""
    port = free_port()
    config = uvicorn.Config(
        create_capture_app(upstream, sink), host=LOOPBACK, port=port, log_level="warning"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="capture-proxy", daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError(f"capture proxy failed to start on port {port}")
        time.sleep(0.05)
    try:
        yield f"http://{LOOPBACK}:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
