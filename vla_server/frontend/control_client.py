"""The main process's side of the control plane: rpc calls to the scheduler, pause/resume,
flush, weight updates, sessions and state queries. It gets the parts of the front end it
acts on (the generation gate, the session registry, an abort-all and the action tokenizer), not
the TokenizerManager."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from typing import Any

import zmq.asyncio

from vla_server.errors import RequestError
from vla_server.frontend.generation_gate import GenerationGate
from vla_server.frontend.session_registry import SessionRegistry, parse_open_session
from vla_server.io_struct import (
    CloseSessionReq,
    ContinueGenerationReq,
    FlushCacheReq,
    GetInternalStateReq,
    OpenSessionReq,
    PauseGenerationReq,
    RpcReply,
    UpdateWeightsFromDiskReq,
    decode_or_drop,
    encode,
    rpc_reply_decoder,
)

logger = logging.getLogger(__name__)

PAUSE_MODES = ("abort", "retract", "in_place")


class ControlClient:
    def __init__(
        self,
        sock: zmq.asyncio.Socket,
        gate: GenerationGate,
        sessions: SessionRegistry,
        *,
        before_call: Callable[[], None],
        abort_all: Callable[[], None],
        resolve_unnorm_key: Callable[[str | None], str | None],
    ):
        self.sock = sock
        self.gate = gate
        self.sessions = sessions
        self.before_call = before_call  # starts the reply loop; refuses when the engine is down
        self.abort_all = abort_all
        self.resolve_unnorm_key = resolve_unnorm_key  # the family's; RequestError when bad
        self._call_ids = itertools.count(1)
        self._waiters: dict[int, asyncio.Future[RpcReply]] = {}

    async def reply_loop(self) -> None:
        while True:
            reply = decode_or_drop(rpc_reply_decoder, await self.sock.recv(), "rpc")
            if reply is None:
                continue
            fut = self._waiters.pop(reply.call_id, None)
            if fut is not None and not fut.done():
                fut.set_result(reply)

    def fail_all(self, exc: Exception) -> None:
        for fut in self._waiters.values():
            if not fut.done():
                fut.set_exception(exc)
        self._waiters.clear()

    async def call(self, msg_type: type, **fields: Any) -> RpcReply:
        self.before_call()
        call_id = next(self._call_ids)
        fut: asyncio.Future[RpcReply] = asyncio.get_running_loop().create_future()
        self._waiters[call_id] = fut
        await self.sock.send(encode(msg_type(call_id=call_id, **fields)))
        return await fut

    async def pause_generation(self, mode: str) -> RpcReply:
        if mode not in PAUSE_MODES:
            raise RequestError(
                f"unknown mode {mode!r}; one of {', '.join(PAUSE_MODES)}", field="mode"
            )
        self.gate.paused = True
        if mode == "abort":
            await self._abort_until_drained()
            return RpcReply(call_id=0, success=True, message="paused; in-flight requests aborted")
        return await self.call(PauseGenerationReq, mode=mode)

    async def _abort_until_drained(self) -> None:
        # Re-send every second: a request may be dispatched between two aborts.
        while self.gate.in_flight > 0:
            self.abort_all()
            for _ in range(20):
                if self.gate.in_flight == 0:
                    return
                await asyncio.sleep(0.05)

    async def continue_generation(self) -> RpcReply:
        await self.gate.resume()
        return await self.call(ContinueGenerationReq)

    async def flush_cache(self) -> RpcReply:
        return await self.call(FlushCacheReq)

    async def update_weights_from_disk(self, model_path: str) -> RpcReply:
        if self.gate.paused:
            return await self.call(UpdateWeightsFromDiskReq, model_path=model_path)
        in_flight = self.gate.in_flight
        if in_flight:
            # An operator waiting on the update should see why it has not happened yet.
            logger.info(
                "weight update from %s waits for %d in-flight request(s) to finish",
                model_path,
                in_flight,
            )
        async with self.gate.lock.writer():
            return await self.call(UpdateWeightsFromDiskReq, model_path=model_path)

    async def open_session(self, body: dict[str, Any]) -> str:
        req = parse_open_session(body)
        assert req.session_id is not None
        if req.unnorm_key is not None:
            self.resolve_unnorm_key(req.unnorm_key)
        reply = await self.call(
            OpenSessionReq,
            session_id=req.session_id,
            capacity_of_str_len=req.capacity_of_str_len,
            timeout=req.timeout,
        )
        if not reply.success:
            raise RequestError(reply.message, "session_id")
        self.sessions.add(req)
        return req.session_id

    async def close_session(self, session_id: str) -> None:
        reply = await self.call(CloseSessionReq, session_id=session_id)
        self.sessions.remove(session_id)
        if not reply.success:
            raise RequestError(reply.message, "session_id")

    async def internal_state(self) -> dict[str, Any]:
        return (await self.call(GetInternalStateReq)).data
