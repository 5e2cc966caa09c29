"""TokenizerManager: the main process's side of the ring (asyncio).

`generate_request` takes the normalised items a route made (steps 3-5 and 11 of the request path
in docs/architecture.md): apply the session's and the node's robot defaults -> create per-rid
state up front (a duplicate rid in flight is an error) -> pass the generation gate (wait while
paused, then hold it through the whole response, so a weight update waits) -> tokenize -> send
-> wait. A failure before dispatch removes the state; a failure after dispatch sends exactly one
abort, and the scheduler's echo removes the state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec
import zmq
import zmq.asyncio

from vla_server.config import FrontendConfig, PortArgs
from vla_server.errors import RequestError
from vla_server.frontend.control_client import ControlClient
from vla_server.frontend.generate_request import (
    GenerateItem,
    ModelLimits,
    check_no_stop,
    check_prompt_length,
    check_token_ids,
)
from vla_server.frontend.generation_gate import GenerationGate
from vla_server.frontend.guidance_request import wire_guidance
from vla_server.frontend.mm_frontend import MultimodalFrontend
from vla_server.frontend.output_metrics import observe_output
from vla_server.frontend.req_state import (
    ReqState,
    coalesce,
    extend_logprobs,
    logprob_delta,
    meta_info,
)
from vla_server.frontend.session_registry import NodeRobotDefaults, SessionRegistry
from vla_server.frontend.state_pad import with_state_pad_id
from vla_server.frontend.stream_order import StreamOrder
from vla_server.frontend.text_encoder import TextEncoder
from vla_server.io_struct import (
    AbortReq,
    BatchStrOutput,
    BatchTokenizedGenerateReqInput,
    ModelInfo,
    SchedulerStats,
    Tensor,
    TokenizedGenerateReqInput,
    decode_or_drop,
    encode,
    finish_json,
    protected_first,
    tokenizer_input_decoder,
)
from vla_server.metrics import ServerMetrics
from vla_server.policies.base import ActionAsk, PolicyFrontend, PromptPlan
from vla_server.policies.registry import checkpoint_tokenizer, from_info, import_plugins
from vla_server.process_utils import zmq_socket

logger = logging.getLogger(__name__)

BACKLOG_WARN_CHUNKS = 20  # warn when a consumer is more than this many chunks behind
DISCONNECT_POLL_S = 0.5
# Asking Starlette whether the client left costs a cancel scope and a task repr each time
# (about a tenth of the front end's time per streamed token when asked on every token).
DISCONNECT_CHECK_INTERVAL_S = 0.02


class DisconnectCheck:
    """Whether an HTTP caller went away, asked at most every DISCONNECT_CHECK_INTERVAL_S."""

    def __init__(self, request: Any):
        self.request = request
        self.next_check = 0.0

    async def due_and_gone(self) -> bool:
        now = time.monotonic()
        if now < self.next_check:
            return False
        self.next_check = now + DISCONNECT_CHECK_INTERVAL_S
        return bool(await self.request.is_disconnected())


class EngineDeadError(RuntimeError):
    pass


class TokenizerManager:
    def __init__(self, config: FrontendConfig, port_args: PortArgs):
        self.config = config
        self.tokenizer: Any = None  # the family's, once the scheduler is ready
        self.limits: ModelLimits | None = None  # known once the scheduler is ready
        self.info: ModelInfo
        self.policy: PolicyFrontend
        self.mm: MultimodalFrontend
        self.text_encoder: TextEncoder
        self.sessions = SessionRegistry(NodeRobotDefaults.from_config(config))
        self.rid_to_state: dict[str, ReqState] = {}
        self.metrics = ServerMetrics()
        self.gate = GenerationGate()
        self.order = StreamOrder(
            protector(config), config.max_hold_ms / 1e3, lambda: self.rid_to_state.values()
        )
        self.dead_reason: str | None = None
        # The scheduler's stats as of its latest output (GET /get_load): each output carries
        # them, and the last output of a request carries them after its KV was released.
        self.last_stats = SchedulerStats(0, 0, 0, 0)
        self._ctx = zmq.asyncio.Context(2)
        self.recv_sock = zmq_socket(self._ctx, zmq.PULL, port_args.tokenizer_ipc_name, bind=True)
        self.send_sock = zmq_socket(
            self._ctx, zmq.PUSH, port_args.scheduler_input_ipc_name, bind=False
        )
        self.control = ControlClient(
            zmq_socket(self._ctx, zmq.DEALER, port_args.rpc_ipc_name, bind=True),
            self.gate,
            self.sessions,
            before_call=self._before_control_call,
            abort_all=lambda: self.abort_request(abort_all=True),
            resolve_unnorm_key=lambda key: self.policy.resolve_unnorm_key(key),
        )
        self._loop_tasks: list[asyncio.Task[None]] = []
        self._serving_loop: asyncio.AbstractEventLoop | None = None

    # ---- loops -------------------------------------------------------------------------------

    def ensure_loops(self) -> None:
        if not self._loop_tasks:
            self._serving_loop = asyncio.get_running_loop()
            self.gate.start()
            self._loop_tasks = [
                asyncio.create_task(self._handle_loop()),
                asyncio.create_task(self.control.reply_loop()),
            ]

    async def _handle_loop(self) -> None:
        while True:
            raws = [await self.recv_sock.recv()]
            while self.recv_sock.get(zmq.EVENTS) & zmq.POLLIN:  # what queued meanwhile
                raws.append(await self.recv_sock.recv())
            msgs = [decode_or_drop(tokenizer_input_decoder, raw, "tokenizer") for raw in raws]
            for msg in protected_first([m for m in msgs if m is not None]):
                self._handle_batch_output(msg)

    def close(self) -> None:
        for t in self._loop_tasks:
            t.cancel()
        self._ctx.destroy(linger=0)

    # ---- outputs -----------------------------------------------------------------------------

    def _handle_batch_output(self, msg: BatchStrOutput) -> None:
        s = self.last_stats = msg.stats
        self.metrics.num_running.set(s.num_running_reqs)
        self.metrics.num_waiting.set(s.num_waiting_reqs)
        self.metrics.observe_mm(s)
        self.metrics.kv_used.set(s.kv_used_tokens)
        self.metrics.kv_cached.set(s.kv_cached_tokens)
        self.metrics.retractions.set(s.num_retractions)
        self.metrics.observe_held(s)
        if s.prefix_queried_tokens:
            self.metrics.cache_hit_rate.set(s.prefix_hit_tokens / s.prefix_queried_tokens)
        woken = []
        for i, rid in enumerate(msg.rids):
            state = self.rid_to_state.get(rid)
            if state is None:
                continue
            self._apply_output(state, msg, i)
            if state.finished:
                del self.rid_to_state[rid]
            woken.append(state)
        self.order.hand_over(woken, msg.protected)

    def _apply_output(self, state: ReqState, msg: BatchStrOutput, i: int) -> None:
        meta, new_ids, text = msg.metas[i], msg.output_ids[i], msg.output_strs[i]
        finish = finish_json(msg.finished_reasons[i])  # JSON from here on: the HTTP edge
        observe_output(self.metrics, state, meta, len(new_ids), finish)
        state.text_chunks.append(text)
        state.output_ids.extend(new_ids)
        lp_delta = None
        if msg.logprobs[i] is not None:
            decode = self._decode_one if state.item.return_text_in_logprobs else None
            lp_delta = logprob_delta(msg.logprobs[i], new_ids, decode)
            extend_logprobs(state.logprobs, lp_delta)
        new_actions = msg.actions[i] if msg.actions else []
        if new_actions:
            if state.first_action_time is None:
                state.first_action_time = time.perf_counter()
                self.metrics.ttfa.labels(str(state.item.priority)).observe(
                    state.first_action_time - state.created
                )
            state.actions += new_actions
        state.finished = finish is not None
        if finish is not None and finish.get("type") == "action_error":
            self._send_abort(state.rid)  # the scheduler may still be generating this request
        if state.item.stream:
            chunk = {
                "text": text,
                "output_ids": new_ids,
                "meta_info": meta_info(state, meta, finish, lp_delta),
            }
        elif state.finished:
            chunk = {
                "text": "".join(state.text_chunks),
                "output_ids": state.output_ids,
                "meta_info": meta_info(state, meta, finish, state.logprobs),
            }
        else:
            return
        if state.item.num_actions:
            chunk["actions"] = new_actions if state.item.stream else state.actions
        if state.item.in_batch:
            chunk["index"] = state.item.index
        state.out_list.append(chunk)

    def _decode_one(self, tid: int) -> str:
        return self.tokenizer.decode([tid])

    # ---- requests ----------------------------------------------------------------------------

    async def generate_request(
        self, items: list[GenerateItem], request: Any = None, robot_defaults: bool = False
    ) -> AsyncIterator[dict[str, Any] | list[dict[str, Any]]]:
        """Yield output chunks (streaming) or one final output (a list for a batch).

        Streaming chunks carry what is new since the previous chunk (the routes shape them for
        their clients). `robot_defaults`: the node's robot defaults apply (native routes only,
        see `SessionRegistry.apply`). A caller that may be cancelled while this generator is
        suspended aborts its items synchronously with `abort_if_pending` before closing it.
        """
        self.ensure_loops()
        self._check_alive()
        items = [self.sessions.apply(item, robot_defaults) for item in items]
        states = self._init_states(items)
        try:
            async with self.gate.generation():
                msgs = [await self._timed_tokenize(st) for st in states]
                self._send(msgs, states)
                async for out in self._wait_responses(states, request):
                    yield out
        except BaseException:
            self._release_on_failure(states)
            raise

    def _check_alive(self) -> None:
        if self.dead_reason is not None:
            raise RequestError(f"the engine is down: {self.dead_reason}", status_code=503)

    def _before_control_call(self) -> None:
        self.ensure_loops()
        self._check_alive()

    def _init_states(self, items: list[GenerateItem]) -> list[ReqState]:
        dup = next((it.rid for it in items if it.rid in self.rid_to_state), None)
        if dup is not None:
            raise RequestError(f"request id {dup!r} is already in flight", field="rid")
        shared = asyncio.Event()  # one event per call, so a batch wakes a single waiter
        states = [ReqState(item=it, event=shared) for it in items]
        for st in states:
            self.rid_to_state[st.rid] = st
        return states

    def set_model_info(self, info: ModelInfo) -> None:
        """Called once the scheduler reports ready: the checkpoint's family (built from the
        scheduler's `ModelInfo`), its tokenizer and prompt rules, the model's limits and the
        multimodal front end."""
        cfg = self.config
        import_plugins(cfg.checkpoint.policy_plugins)
        self.family = family = from_info(info)  # its head's shapes: `noise_request.py`
        self.tokenizer = checkpoint_tokenizer(family, cfg.checkpoint.tokenizer_path)
        self.info = info
        self.limits = ModelLimits(info.vocab_size, info.hidden_size, info.context_len)
        self.policy = family.frontend(self.tokenizer, info, cfg.prompt_convention)
        preprocess = family.image_preprocessor(cfg.image_backend)
        self.mm = MultimodalFrontend(cfg, info, self.policy, preprocess)
        self.text_encoder = TextEncoder(self.tokenizer, info.context_len)

    async def _timed_tokenize(self, state: ReqState) -> TokenizedGenerateReqInput:
        start = time.perf_counter()
        msg = await self._tokenize(state.item, state.received)
        state.preprocess_time = time.perf_counter() - start
        return msg

    async def _tokenize(self, item: GenerateItem, received: float) -> TokenizedGenerateReqInput:
        """The wire request of `item`, the only place one is built. A `deadline_ms` without
        `capture_time` counts from `received` (arrival, before pause waits, image decoding)."""
        assert self.limits is not None
        ids, embeds, field = await self._prompt_ids(item)
        if item.num_actions:
            ids = self.policy.action_prompt_ids(ids)
        ids, mm_items = await self.mm.expand(item, ids, field)
        check_prompt_length(len(ids), self.limits, field)
        plan = self._plan(item, len(ids))
        ids = with_state_pad_id(ids, plan.state_position, plan.state, self.limits.vocab_size)
        params = item.sampling_params
        if plan.max_new_tokens is not None:
            params = msgspec.structs.replace(
                params,
                max_new_tokens=plan.max_new_tokens,
                stop_token_ids=list(plan.stop_token_ids),
            )
        if item.logprob_start_len >= len(ids):
            raise RequestError(
                f"must be smaller than the prompt length {len(ids)}", field="logprob_start_len"
            )
        return TokenizedGenerateReqInput(
            rid=item.rid,
            input_ids=ids,
            sampling_params=params,
            input_embeds=embeds,
            return_logprob=item.return_logprob,
            logprob_start_len=item.logprob_start_len,
            top_logprobs_num=item.top_logprobs_num,
            stream=item.stream,
            mm_items=mm_items,
            num_actions=item.num_actions or 0,
            unnorm_key=item.unnorm_key,
            priority=item.priority,
            deadline=item.deadline_at(received),
            action_period=(item.control_period_ms or 0.0) / 1000,
            tokens_per_action=plan.tokens_per_action,
            supersede=item.supersede,
            session_id=item.session_id,
            session_params=item.session_params,
            prefix_lm_len=plan.prefix_lm_len,
            position_shift=plan.position_shift,
            relaxed_decoding=item.relaxed_decoding,
            state=None if plan.state is None else Tensor.from_numpy(plan.state),
            state_position=plan.state_position,
            guidance=wire_guidance(item.guidance, self.policy, item.num_actions),
            noise=item.noise,
        )

    def _plan(self, item: GenerateItem, prompt_len: int) -> PromptPlan:
        """The family's plan for the prompt, after the checks every action request gets."""
        assert self.limits is not None
        if not item.num_actions:
            if item.unnorm_key is not None:
                raise RequestError("unnorm_key needs num_actions", "num_actions")
        else:
            if self.policy.action_dim is None:
                raise RequestError("this model has no action head", "num_actions")
            check_no_stop(item)
            self.policy.resolve_unnorm_key(item.unnorm_key)
        ask = ActionAsk(item.num_actions or 0, item.unnorm_key, item.state)
        return self.policy.plan(ask, prompt_len, self.limits.context_len)

    async def _prompt_ids(self, item: GenerateItem) -> tuple[list[int], Tensor | None, str]:
        """The prompt's token ids (placeholders for embeddings), its embeddings, its field."""
        assert self.limits is not None
        if item.input_embeds is not None:
            if item.images:
                raise RequestError("image_data cannot be combined with input_embeds", "image_data")
            ids = [0] * item.input_embeds.shape[0]
            return ids, Tensor.from_numpy(item.input_embeds), "input_embeds"
        if item.text is not None:
            return await self.text_encoder.encode(self.policy.prompt_text(item.text)), None, "text"
        ids = list(item.input_ids or [])
        check_token_ids(ids, self.limits, "input_ids")
        return ids, None, "input_ids"

    def _send(self, msgs: list[TokenizedGenerateReqInput], states: list[ReqState]) -> None:
        payload = msgs[0] if len(msgs) == 1 else BatchTokenizedGenerateReqInput(batch=msgs)
        # Copied, not zero-copy: a frame's pixels (600 KB on the demo) copy in tens of
        # microseconds, while a zero-copy send wakes pyzmq's garbage-collector thread, which
        # takes the GIL from the event loop to release the buffer.
        self.send_sock.send(encode(payload))
        for st in states:
            st.dispatched = True

    async def _wait_responses(
        self, states: list[ReqState], request: Any
    ) -> AsyncIterator[dict[str, Any] | list[dict[str, Any]]]:
        event = states[0].event
        stream, is_batch = states[0].item.stream, states[0].item.in_batch
        finals: dict[int, dict[str, Any]] = {}
        gone = None if request is None else DisconnectCheck(request)
        while len(finals) < len(states):
            await self._wait_event(event, gone)
            event.clear()
            for st in states:
                if not st.out_list:
                    continue
                chunks, st.out_list = st.out_list, []
                _warn_backlog(st.rid, len(chunks))
                out = coalesce(chunks) if stream else chunks[-1]
                if st.finished:
                    finals[st.item.index] = out
                if stream:
                    yield out
        if not stream:
            yield [finals[i] for i in range(len(states))] if is_batch else finals[0]

    async def _wait_event(self, event: asyncio.Event, gone: DisconnectCheck | None) -> None:
        """Wait for new output; an HTTP caller that went away raises ClientDisconnected.

        The client is checked on wake-ups too, not only on timeouts: a non-streaming request
        wakes for the scheduler's periodic intermediate outputs and might never time out.
        """
        timeout = 1.0 if gone is None else DISCONNECT_POLL_S
        while True:
            if self.dead_reason is not None and not event.is_set():
                raise RequestError(f"the engine is down: {self.dead_reason}", status_code=503)
            if not event.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):  # no extra task, as wait_for makes
                        await event.wait()
            if gone is not None and await gone.due_and_gone():
                raise ClientDisconnected()
            if event.is_set():
                return

    def _release_on_failure(self, states: list[ReqState]) -> None:
        for st in states:
            if self.rid_to_state.get(st.rid) is not st:
                continue
            if not st.dispatched:
                del self.rid_to_state[st.rid]
            elif not st.abort_sent:
                st.abort_sent = True
                self._send_abort(st.rid)

    def _send_abort(self, rid: str = "", abort_all: bool = False) -> None:
        try:
            self.send_sock.send(encode(AbortReq(rid=rid, abort_all=abort_all)))
        except zmq.ZMQError as e:
            logger.warning("could not send abort for %r: %s", rid, e)

    def abort_if_pending(self, rids: list[str]) -> None:
        """Abort those of `rids` still in flight (a consumer that went away); never awaits."""
        for rid in rids:
            st = self.rid_to_state.get(rid)
            if st is not None:
                self._release_on_failure([st])

    def abort_request(self, rid: str = "", abort_all: bool = False) -> bool:
        if not abort_all and rid not in self.rid_to_state:
            return False
        self._send_abort(rid, abort_all)
        return True

    # ---- engine death ------------------------------------------------------------------------

    def mark_dead(self, reason: str) -> None:
        """Fail every pending request and control call: a child process is gone."""
        self.dead_reason = reason
        for st in list(self.rid_to_state.values()):
            st.finished = True
            st.event.set()
        self.rid_to_state.clear()
        self.control.fail_all(EngineDeadError(reason))

    def mark_dead_threadsafe(self, reason: str) -> None:
        """`mark_dead` from another thread (the watchdog's). The reason is set here at once (one
        attribute write), so /health and new requests see it before the loop gets to run."""
        self.dead_reason = reason
        if self._serving_loop is not None:
            self._serving_loop.call_soon_threadsafe(self.mark_dead, reason)


def protector(config: FrontendConfig) -> Callable[[ReqState], bool] | None:
    """Whether a request is protected by priority isolation (None: the node has none)."""
    rt = config.realtime_priority
    if rt is None:
        return None

    def protects(state: ReqState) -> bool:
        p = state.item.priority
        p = config.default_priority_value if p is None else p
        return p <= rt if config.schedule_low_priority_values_first else p >= rt

    return protects


class ClientDisconnected(Exception):
    pass


def _warn_backlog(rid: str, queued: int) -> None:
    """A consumer more than BACKLOG_WARN_CHUNKS chunks behind is worth a warning: it is what
    shows up as P99 inter-token latency at the client."""
    if queued > BACKLOG_WARN_CHUNKS:
        logger.warning(
            "streaming backlog: %d chunks queued for rid %s; the consumer is slow and this "
            "shows up as P99 inter-token latency",
            queued,
            rid,
        )
