"""Control-plane requests handled by the scheduler (the rpc DEALER channel): pause modes,
continue, cache flush, weight updates, sessions, internal state. Each answers an RpcReply."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from vla_server.io_struct import (
    CloseSessionReq,
    ContinueGenerationReq,
    FlushCacheReq,
    GetInternalStateReq,
    OpenSessionReq,
    PauseGenerationReq,
    RpcReply,
    UpdateWeightsFromDiskReq,
)
from vla_server.scheduler.image_embedder import ImageEmbedder
from vla_server.scheduler.kv_cache_manager import KVCacheManager
from vla_server.scheduler.sessions import SessionController, SessionError
from vla_server.scheduler.state import SchedState
from vla_server.scheduler.step_cost import StepCostModel


class SchedulerControl:
    def __init__(
        self,
        state: SchedState,
        kv: KVCacheManager,
        sessions: SessionController,
        update_weights: Callable[[str], None],
        embedder: ImageEmbedder | None,
        drain: Callable[[], None],
        abort_all: Callable[[], None],
        step_cost: StepCostModel,
        model_counters: Callable[[], dict[str, Any]] | None = None,
        realtime_period: Callable[[], float | None] | None = None,
    ):
        self.state = state
        self.kv = kv
        self.sessions = sessions
        self.update_weights = update_weights
        self.embedder = embedder
        self.drain = drain
        self.abort_all = abort_all
        self.step_cost = step_cost
        self.model_counters = model_counters  # the model runner's work counters, if it keeps any
        self.realtime_period = realtime_period  # priority isolation's learned control-loop period
        self.weight_version = 0
        self.handlers: dict[type, Callable[[Any], RpcReply]] = {
            PauseGenerationReq: self.pause,
            ContinueGenerationReq: self.resume,
            FlushCacheReq: self.flush_cache,
            UpdateWeightsFromDiskReq: self.update_weights_from_disk,
            GetInternalStateReq: self.internal_state,
            OpenSessionReq: self.open_session,
            CloseSessionReq: self.close_session,
        }

    def handle(self, msg: Any) -> RpcReply:
        try:
            return self.handlers[type(msg)](msg)
        except Exception as e:  # a control call must answer, never kill the loop
            return RpcReply(call_id=msg.call_id, success=False, message=f"{type(e).__name__}: {e}")

    def _realtime_period_ms(self) -> float | None:
        period = None if self.realtime_period is None else self.realtime_period()
        return None if period is None else period * 1e3

    def pause(self, msg: PauseGenerationReq) -> RpcReply:
        """`in_place` keeps everything resident; `retract` hands running requests' KV to the
        cache and re-queues them, so the cache can be flushed while paused; `abort` ends every
        request (the main process does that itself before it pauses)."""
        s = self.state
        self.drain()
        s.paused = True
        if msg.mode == "retract":
            for req in [r for r in s.running if not r.finished]:
                s.retract(req, self.kv)
        elif msg.mode == "abort":
            self.abort_all()
        return RpcReply(call_id=msg.call_id, success=True, message=f"paused ({msg.mode})")

    def resume(self, msg: ContinueGenerationReq) -> RpcReply:
        self.state.paused = False
        return RpcReply(call_id=msg.call_id, success=True)

    def _flush_refusal(self) -> str | None:
        s = self.state
        self.drain()
        if s.running:
            return f"{len(s.running)} requests are running; abort them or pause with mode retract"
        if s.waiting and not s.paused:
            return f"{len(s.waiting)} requests are waiting; pause generation first"
        return None

    def _flush(self) -> None:
        self.kv.flush()
        self.sessions.drop_pins()
        if self.embedder is not None:
            self.embedder.clear()

    def flush_cache(self, msg: FlushCacheReq) -> RpcReply:
        refusal = self._flush_refusal()
        if refusal:
            return RpcReply(
                call_id=msg.call_id, success=False, message="cannot flush the cache: " + refusal
            )
        self._flush()
        return RpcReply(call_id=msg.call_id, success=True, message="cache flushed")

    def update_weights_from_disk(self, msg: UpdateWeightsFromDiskReq) -> RpcReply:
        refusal = self._flush_refusal()
        if refusal:
            return RpcReply(
                call_id=msg.call_id,
                success=False,
                message="cannot update weights: the cache must be flushed and " + refusal,
            )
        self.update_weights(msg.model_path)
        self._flush()
        self.weight_version += 1
        return RpcReply(
            call_id=msg.call_id,
            success=True,
            message=f"weights loaded from {msg.model_path}",
            data={"weight_version": self.weight_version},
        )

    def open_session(self, msg: OpenSessionReq) -> RpcReply:
        try:
            self.sessions.open(msg.session_id, msg.capacity_of_str_len, msg.timeout)
        except SessionError as e:
            return RpcReply(call_id=msg.call_id, success=False, message=str(e))
        return RpcReply(call_id=msg.call_id, success=True, data={"session_id": msg.session_id})

    def close_session(self, msg: CloseSessionReq) -> RpcReply:
        try:
            self.sessions.close(msg.session_id)
        except SessionError as e:
            return RpcReply(call_id=msg.call_id, success=False, message=str(e))
        return RpcReply(call_id=msg.call_id, success=True)

    def internal_state(self, msg: GetInternalStateReq) -> RpcReply:
        s, kv = self.state, self.kv
        tree = kv.tree
        return RpcReply(
            call_id=msg.call_id,
            success=True,
            data={
                "kv_pool": {
                    "total": kv.total_tokens,
                    "used": kv.used_tokens(),
                    "free": kv.free_tokens(),
                    "cached": tree.evictable_size(),
                    "pinned": tree.pinned_size(),
                },
                "radix_cache": {
                    "enabled": not tree.disable,
                    "hit_tokens": tree.stats.hit_tokens,
                    "queried_tokens": tree.stats.queried_tokens,
                    "hit_rate": tree.stats.hit_rate,
                },
                "num_running_reqs": len(s.running),
                "num_waiting_reqs": len(s.waiting),
                "num_retractions": s.num_retractions,
                "held_steps": s.held_steps,
                "num_held_reqs": s.num_held,
                "background_steps": s.background_steps,
                "max_unprotected_gap_ms": s.max_unprotected_gap_s * 1e3,
                "max_step_ms": s.max_step_s * 1e3,
                "step_time_ms": self.step_cost.table(),
                "realtime_period_ms": self._realtime_period_ms(),
                "open_sessions": len(self.sessions.sessions),
                "paused": s.paused,
                "weight_version": self.weight_version,
                "mm_embedding_cache": None if self.embedder is None else self.embedder.state(),
                "model_counters": None if self.model_counters is None else self.model_counters(),
            },
        )
