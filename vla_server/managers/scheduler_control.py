"""Control-plane requests handled by the scheduler (the rpc DEALER channel)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from vla_server.io_struct import (
    ContinueGenerationReq,
    FlushCacheReq,
    GetInternalStateReq,
    PauseGenerationReq,
    RpcReply,
    UpdateWeightsFromDiskReq,
)

if TYPE_CHECKING:
    from vla_server.managers.scheduler import Scheduler


class SchedulerControl:
    def __init__(self, scheduler: Scheduler):
        self.s = scheduler
        self.weight_version = 0
        self.handlers: dict[type, Callable[[Any], RpcReply]] = {
            PauseGenerationReq: self.pause,
            ContinueGenerationReq: self.resume,
            FlushCacheReq: self.flush_cache,
            UpdateWeightsFromDiskReq: self.update_weights_from_disk,
            GetInternalStateReq: self.internal_state,
        }

    def handle(self, msg: Any) -> RpcReply:
        try:
            return self.handlers[type(msg)](msg)
        except Exception as e:  # a control call must answer, never kill the loop
            return RpcReply(call_id=msg.call_id, success=False, message=f"{type(e).__name__}: {e}")

    def pause(self, msg: PauseGenerationReq) -> RpcReply:
        self.s.paused = True
        return RpcReply(call_id=msg.call_id, success=True)

    def resume(self, msg: ContinueGenerationReq) -> RpcReply:
        self.s.paused = False
        return RpcReply(call_id=msg.call_id, success=True)

    def _busy_message(self) -> str:
        return (
            f"{len(self.s.running)} running and {len(self.s.waiting)} waiting requests; "
            "abort them or pause generation first"
        )

    def _flush(self) -> None:
        self.s.kv.req_to_token_pool.clear()
        self.s.kv.allocator.clear()
        if self.s.embedder is not None:
            self.s.embedder.clear()

    def flush_cache(self, msg: FlushCacheReq) -> RpcReply:
        if not self.s.is_idle():
            return RpcReply(
                call_id=msg.call_id,
                success=False,
                message="cannot flush the cache: " + self._busy_message(),
            )
        self._flush()
        return RpcReply(call_id=msg.call_id, success=True, message="cache flushed")

    def update_weights_from_disk(self, msg: UpdateWeightsFromDiskReq) -> RpcReply:
        if not self.s.is_idle():
            return RpcReply(
                call_id=msg.call_id,
                success=False,
                message="cannot update weights: " + self._busy_message(),
            )
        self.s.runner.update_weights_from_disk(msg.model_path)
        self._flush()
        self.weight_version += 1
        return RpcReply(
            call_id=msg.call_id,
            success=True,
            message=f"weights loaded from {msg.model_path}",
            data={"weight_version": self.weight_version},
        )

    def _mm_cache_state(self) -> dict[str, Any] | None:
        emb = self.s.embedder
        if emb is None:
            return None
        st = emb.cache.stats()
        return {
            "hits": emb.hits,
            "misses": emb.misses,
            "items": st.items,
            "bytes": st.bytes,
            "budget_bytes": st.budget_bytes,
            "evictions": st.evictions,
        }

    def internal_state(self, msg: GetInternalStateReq) -> RpcReply:
        kv = self.s.kv
        return RpcReply(
            call_id=msg.call_id,
            success=True,
            data={
                "kv_pool": {
                    "total": kv.total_tokens,
                    "used": kv.used_tokens(),
                    "free": kv.free_tokens(),
                },
                "num_running_reqs": len(self.s.running),
                "num_waiting_reqs": len(self.s.waiting),
                "paused": self.s.paused,
                "weight_version": self.weight_version,
                "mm_embedding_cache": self._mm_cache_state(),
            },
        )
