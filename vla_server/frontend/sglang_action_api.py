"""SGLang's action API (its `multimodal_gen` policy serving), on the node's one action query.

Routes, as SGLang's `entrypoints/action/{api,ws_utils,openpi}.py` serve them:

* `POST /v1/actions/generations`: the body is msgpack when `Content-Type` contains "msgpack",
  else JSON; the reply is msgpack (`application/msgpack`, openpi's ndarray markers) when
  `Content-Type` or `Accept` contains "msgpack", else JSON. The reply is SGLang's envelope
  (`action.generation`, the chunk under `data[0].action.values`) or, with
  `runtime.response_format: "raw"`, its pipeline dict (`request_id`, `actions`, `parameters`,
  `timings`, `cache`). An error is `{"detail": "<field>: <problem>", "field": ...}` (JSON even for
  msgpack, as SGLang answers): 400 for bad input, 500 if the node could not decode the chunk.
* `GET /v1/actions/metadata`: `action.metadata` of the served checkpoint (`sglang_action_policy`).
* `WS /v1/actions/realtime` and `WS /openpi/policy`: on accept one binary frame, the metadata;
  then each binary frame (a flat or envelope payload, msgpack) gets one binary reply, with
  `server_timing {infer_ms, prev_total_ms}`: the envelope on `/v1/actions/realtime`, the raw dict
  (`result["actions"]` a float32 array) on `/openpi/policy`. Unlike SGLang, an error does not
  close the socket: the reply is `{"error": "<field>: <problem>", "detail": ..., "field": ...}`
  and the next frame is served (a frame over `--sglang-action-max-payload-bytes` too).

`/openpi/policy` is SGLang's flavour of openpi's protocol (its keys, its reply); openpi's own
flavour (robot-native keys, `{"actions", "server_timing"}`) stays at `/`, the path openpi's
client uses, so the two never meet. Each request is `sglang_action_wire.sglang_ask`'s
`ActionsBody`, run by `openpi_policy.infer_actions`: the node's priorities, deadlines, session
defaults, API key, limits and metrics apply as on `/v1/actions`. Not SGLang's: the denoising
schedule is the checkpoint's (`num_inference_steps` other than it is a 400), and a request without
`seed` or `noise` starts from fresh noise.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

import msgspec
import numpy as np
from fastapi import FastAPI, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import Response

from vla_server.errors import RequestError
from vla_server.frontend.action_request import ActionFailed
from vla_server.frontend.common import json_response, served_model_id
from vla_server.frontend.json_body import decode_json
from vla_server.frontend.node_handle import NodeHandle
from vla_server.frontend.openpi_policy import Inference, infer_actions
from vla_server.frontend.openpi_wire import WireFormatError, pack, unpack
from vla_server.frontend.sglang_action_policy import ServedPolicy, action_metadata
from vla_server.frontend.sglang_action_wire import SglangAsk, sglang_ask

logger = logging.getLogger(__name__)

GENERATIONS, METADATA = "/v1/actions/generations", "/v1/actions/metadata"
REALTIME, OPENPI = "/v1/actions/realtime", "/openpi/policy"
MSGPACK = "application/msgpack"
INTERNAL_ERROR = "Internal inference error"


def _timings(out: Inference) -> dict[str, float]:
    """The node's stage times, flat (SGLang's clients average every value as a float)."""
    times = out.timing.to_json()
    times["time_to_first_token_ms"] = None  # a denoised chunk has no tokens
    return {k: v for k, v in times.items() if isinstance(v, float)}


def _cache(out: Inference) -> dict[str, Any]:
    cached = int(out.meta.get("cached_tokens") or 0)
    return {"hit": cached > 0, "scope": "radix", "prefix_len": cached}


class Answer:
    """One request's outcome, in the shapes SGLang replies with."""

    def __init__(self, node: NodeHandle, policy: ServedPolicy, ask: SglangAsk, out: Inference):
        self.node, self.policy, self.ask, self.out = node, policy, ask, out
        actions = np.asarray(out.actions, dtype=np.float32)
        self.actions = policy.normalized_actions(actions) if ask.client_normalized else actions
        self.id = ask.request_id or f"act_{out.rid}"

    def envelope(self, numpy: bool) -> dict[str, Any]:
        horizon, dim = self.actions.shape
        action = {
            "type": "continuous",
            "dtype": "float32",
            "shape": [horizon, dim],
            "values": self.actions if numpy else self.actions.tolist(),
            "normalized": self.ask.client_normalized,
        }
        return {
            "id": self.id,
            "object": "action.generation",
            "created": int(time.time()),
            "model": served_model_id(self.node.config),
            "data": [{"index": 0, "input_index": 0, "candidate_index": 0, "action": action}],
            "usage": {
                "batch_size": 1,
                "action_horizon": horizon,
                "action_dim": dim,
                "denoise_steps": self.policy.num_inference_steps,
                "prefix_cache_hit": _cache(self.out)["hit"],
            },
            "timings": _timings(self.out),
            "cache": _cache(self.out),
        }

    def raw(self, numpy: bool) -> dict[str, Any]:
        numpy = numpy and self.ask.output_format == "numpy"
        return {
            "request_id": self.id,
            "actions": self.actions if numpy else self.actions.tolist(),
            "parameters": {"num_inference_steps": self.policy.num_inference_steps},
            "timings": _timings(self.out),
            "cache": _cache(self.out),
        }

    def reply(self, numpy: bool) -> dict[str, Any]:
        return self.raw(numpy) if self.ask.response_format == "raw" else self.envelope(numpy)


async def answer(
    node: NodeHandle, payload: Any, default_output: str, request: Any = None
) -> Answer:
    """Run one SGLang payload; a RequestError names the payload's field."""
    policy = ServedPolicy.of(node)
    ask = sglang_ask(payload, policy, default_output)
    if ask.client_normalized and policy.stats is None:
        raise RequestError("this policy has no statistics to normalise with", "client_normalized")
    try:
        out = await infer_actions(node.tokenizer_manager, ask.body, request)
    except RequestError as e:
        raise ask.rename(e) from None
    return Answer(node, policy, ask, out)


def _problem(e: RequestError) -> str:
    return f"{e.field}: {e.message}" if e.field else e.message


def _detail(e: RequestError) -> Response:
    return json_response({"detail": _problem(e), "field": e.field}, e.status_code)


def _payload(body: bytes, msgpack: bool) -> Any:
    if not msgpack:
        return decode_json(body or b"{}")
    try:
        return unpack(body)
    except WireFormatError as e:
        raise RequestError(str(e), "body") from None


def add_sglang_action_routes(app: FastAPI, node: NodeHandle) -> None:
    @app.post(GENERATIONS)
    async def generations(request: Request) -> Response:
        ctype = request.headers.get("content-type", "").lower()
        wants = "msgpack" in ctype or "msgpack" in request.headers.get("accept", "").lower()
        try:
            payload = _payload(await request.body(), "msgpack" in ctype)
            done = await answer(node, payload, "numpy" if wants else "list", request)
        except RequestError as e:
            return _detail(e)
        except ActionFailed as e:
            logger.warning("SGLang action API: action decoding failed: %s", e)
            return json_response({"detail": INTERNAL_ERROR}, 500)
        if wants:
            return Response(pack(done.reply(numpy=True)), media_type=MSGPACK)
        return Response(msgspec.json.encode(done.reply(numpy=False)), media_type="application/json")

    @app.get(METADATA)
    async def metadata() -> Response:
        try:
            return json_response(action_metadata(node))
        except RequestError as e:  # a model without actions
            return _detail(e)

    for path, raw in ((REALTIME, False), (OPENPI, True)):
        _add_socket(app, node, path, raw)


def _add_socket(app: FastAPI, node: NodeHandle, path: str, raw: bool) -> None:
    @app.websocket(path)
    async def action_socket(ws: WebSocket) -> None:
        await ws.accept()
        try:
            await ActionSocket(ws, node, path, raw).run()
        except (WebSocketDisconnect, OSError):
            return  # the client went away
        except Exception:
            logger.exception("SGLang action socket failed")
            with contextlib.suppress(WebSocketDisconnect, OSError, RuntimeError):
                await ws.send_bytes(pack({"error": INTERNAL_ERROR}))
                await ws.close(code=1011)


class ActionSocket:
    """One connection: the metadata frame, then one reply per binary frame."""

    def __init__(self, ws: WebSocket, node: NodeHandle, path: str, raw: bool):
        self.ws, self.node, self.path, self.raw = ws, node, path, raw
        self.max_bytes = node.config.sglang_action_max_payload_bytes
        self.prev_total_ms: float | None = None

    async def run(self) -> None:
        try:
            meta = action_metadata(self.node)
        except RequestError as e:  # a model without actions: nothing to serve here
            await self.ws.send_bytes(pack({"error": _problem(e), "detail": _problem(e)}))
            await self.ws.close(code=1008)
            return
        await self.ws.send_bytes(pack(meta))
        while True:
            msg = await self.ws.receive()
            if msg["type"] == "websocket.disconnect":
                return
            start = time.perf_counter()
            reply = await self.answer(msg.get("bytes"), start)
            await self.ws.send_bytes(pack(reply))
            if "error" not in reply:
                self.prev_total_ms = (time.perf_counter() - start) * 1000.0

    async def answer(self, frame: bytes | None, start: float) -> dict[str, Any]:
        """The reply to one frame; counted in `vla_http_requests_total` under this route, with
        the status the same failure gets over HTTP."""
        status = 200
        try:
            done = await answer(self.node, self._payload(frame), "numpy")
        except RequestError as e:
            status = e.status_code
            return {"error": _problem(e), "detail": _problem(e), "field": e.field}
        except ActionFailed as e:
            status = 500
            logger.warning("SGLang action socket: action decoding failed: %s", e)
            return {"error": INTERNAL_ERROR, "detail": INTERNAL_ERROR, "field": None}
        finally:
            metrics = self.node.tokenizer_manager.metrics
            metrics.http_requests.labels(self.path, str(status)).inc()
        out = done.raw(numpy=True) if self.raw else done.envelope(numpy=True)
        out["server_timing"] = {"infer_ms": (time.perf_counter() - start) * 1000.0}
        if self.prev_total_ms is not None:
            out["server_timing"]["prev_total_ms"] = self.prev_total_ms
        return out

    def _payload(self, frame: bytes | None) -> Any:
        if not frame:
            raise RequestError("expected a binary msgpack frame", "payload")
        if len(frame) > self.max_bytes:
            raise RequestError(
                f"{len(frame)} bytes exceed the {self.max_bytes}-byte payload limit "
                "(--sglang-action-max-payload-bytes)",
                "payload",
            )
        try:
            return unpack(frame)
        except WireFormatError as e:
            raise RequestError(str(e), "payload") from None
