"""The bridge's network side: an asyncio loop on its own thread (ROS-free).

Camera callbacks hand frames in with `submit()` (any thread, never blocks). The loop keeps one
request in flight (FrameGate), streams it, hands each action to the sink the moment it arrives,
times TTFT/ITL/first action/frame-to-action into the LatencyMonitor, and fires a deadline timer
per frame: no action by then is a miss and the `on_late` command goes out (with `stop`, the late
request is also cancelled). Without an executor an action is published the moment it arrives,
so the actions of a frame whose `on_late` command already went out in their place are dropped
(counted `actions_late`, the frame `frames_expired`): none is applied after its due time. With
one (`executor_times_actions`), each action goes to the executor, which commands it only at its
own due time. A frame's actions are due one action period apart (`control_period_ms`, told to
the server with the last one's due time as `deadline_ms`); when chunks cannot arrive in time
the worker lengthens the period (with an executor) or asks for fewer actions (without), as
`chunk_budget.py` says, and the monitor's control-loop status turns WARN with the reason. With
`rtc_horizon` set (executor `rtc`), each request carries the executor's unexecuted tail and
measured delay (real-time chunking), and the frame's robot state goes with it when the policy
reads one. A failed server (unreachable, a 5xx, a stream cut short) is one outage:
`on_late` is applied once, requests are retried with exponential backoff (re-probing `/health` and
`/get_server_info` first), and only a request that succeeds ends it, counted as a reconnect. A
`/health` that answers while `/generate` fails therefore keeps the node in ERROR. A request the
server refuses (a 4xx, or a stream ended by an action error) is not an outage but a wrong request
(a configuration error, such as a missing `unnorm_key`): its reason is reported and counted,
`on_late` is applied once when the refusals start, and no backoff slows the next frame. Every
`on_late` command carries the stamp of the frame whose action it replaces.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import httpx

from ros_bridge.chunk_budget import ChunkBudget
from ros_bridge.chunk_executor import RtcGuidance
from ros_bridge.frame_gate import FrameGate, Ticket
from ros_bridge.frame_input import PreparedImage
from ros_bridge.late_policy import LateCommand, OnLate, late_command
from ros_bridge.latency_monitor import LatencyMonitor
from ros_bridge.request_body import FieldSupport, RequestSettings, build_body
from ros_bridge.sse import StreamChunk
from ros_bridge.stream_client import Backoff, RequestRejected, ServerUnavailable, VlaStreamClient

_FAILED_FINISH = ("abort", "action_error")
# Less time than this to a chunk's last due time: nothing of it can come in time (and the
# server takes only a deadline > 0).
MIN_DEADLINE_MS = 1.0


@dataclass(frozen=True)
class FrameJob:
    stamp: tuple[int, int]  # the trigger camera's header.stamp (sec, nanosec)
    images: tuple[PreparedImage, ...]
    state: tuple[float, ...] | None = None  # the robot's joint positions at the frame


@dataclass(frozen=True)
class WorkerConfig:
    request: RequestSettings = field(default_factory=RequestSettings)
    deadline_ms: float = 500.0
    on_late: OnLate = OnLate.HOLD
    action_width: int | None = None  # len(joint_names) when configured
    executor_times_actions: bool = False  # a ChunkExecutor commands each action when it is due
    rtc_horizon: int = 0  # > 0: real-time chunking, guided up to this many actions


class ActionSink(Protocol):
    def publish_action(self, stamp: tuple[int, int], index: int, action: Sequence[float]) -> None:
        """Raises ValueError when the action cannot be published (e.g. wrong width)."""

    def publish_late(self, command: LateCommand) -> None: ...

    def rtc_guidance(self, stamp: tuple[int, int], horizon: int) -> RtcGuidance | None:
        """The executor's tail and delay for a request on the frame stamped `stamp`."""

    def set_action_period(self, period_s: float) -> None:
        """The executor's chunks are now spaced `period_s` apart (the bridge adapted)."""

    def report(self, level: str, message: str) -> None: ...


@dataclass
class _Server:
    ready: bool = False
    multimodal: bool = False
    digest: bytes | None = None
    action_dim: int | None = None  # mm.actions.action_dim of /get_server_info
    state_dim: int = 0  # mm.robot.state_dim: the policy reads the robot's state
    image_token: str | None = None  # mm.image_token: the per-image prompt placeholder
    support: FieldSupport = field(default_factory=FieldSupport)
    session: str | None = None  # the session opened since the server was last probed


class BridgeWorker:
    def __init__(
        self,
        server_url: str,
        config: WorkerConfig,
        monitor: LatencyMonitor,
        sink: ActionSink,
        *,
        api_key: str = "",
        backoff: Backoff | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.server_url = server_url
        self.config = config  # replaced whole (atomic) by set_config
        self.monitor = monitor
        self._sink = sink
        self._api_key = api_key
        self._backoff = backoff or Backoff()
        self._transport = transport
        self._gate: FrameGate[FrameJob] = FrameGate()
        self._server = _Server()
        self._seq = 0  # frames offered to the gate, on the loop
        self._submitted = 0  # frames handed to submit(), on any thread
        self._submit_lock = threading.Lock()
        self._rid_prefix = f"bridge-{uuid.uuid4().hex[:8]}"
        self._last_action: tuple[float, ...] | None = None
        self._budget = _budget(config)
        self._newest_stamp: tuple[int, int] | None = None  # of the newest frame offered
        self._outage = False  # server unavailable since the last successful request
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="vla-bridge-io")
        self._task: asyncio.Task[None] | None = None
        self._main: asyncio.Future[None] | None = None
        self._wake = asyncio.Event()
        self._stopping = False

    # --- called from other threads -------------------------------------------------------
    def start(self) -> None:
        self._thread.start()
        self._main = asyncio.run_coroutine_threadsafe(self._run_forever(), self._loop)

    def submit(self, job: FrameJob, arrived_s: float | None = None) -> None:
        """Queues a frame; it supersedes any frame still waiting.

        `arrived_s` (time.monotonic) is when the frame reached the node, so frame-to-action
        latency includes the callback's own decoding and hashing; default: now.
        """
        arrived_s = time.monotonic() if arrived_s is None else arrived_s
        with self._submit_lock:
            self._submitted += 1
        self._loop.call_soon_threadsafe(self._offer, job, arrived_s)

    def set_config(self, config: WorkerConfig) -> None:
        fresh = _budget(config)
        if (fresh.requested, fresh.period_s) != (self._budget.requested, self._budget.period_s):
            self._budget = fresh  # set again: start afresh
        self.config = config

    @property
    def needs_state(self) -> bool:
        """The served policy reads the robot's state (known once the server was probed)."""
        return self._server.state_dim > 0

    @property
    def num_actions(self) -> int:
        """The actions asked per frame now: num_actions, or fewer after adapting."""
        return self._budget.num_actions

    @property
    def action_period_s(self) -> float:
        """The spacing of a chunk's actions now: as configured, or longer after adapting."""
        return self._budget.action_period_s

    @property
    def digest(self) -> bytes | None:
        return self._server.digest

    @property
    def request_in_flight(self) -> bool:
        return self._gate.in_flight is not None

    def wait_idle(self, timeout_s: float) -> bool:
        """True once every submitted frame has reached the loop and none is waiting or in
        flight (polls; for replay and tests)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._main is not None and self._main.done():
                return True
            with self._submit_lock:
                all_offered = self._seq == self._submitted
            if all_offered and self._gate.in_flight is None and self._gate.waiting is None:
                return True
            time.sleep(0.02)
        return False

    def stop(self, timeout_s: float = 10.0) -> None:
        if not self._thread.is_alive():
            return
        self._loop.call_soon_threadsafe(self._shutdown)
        if self._main is not None:
            with contextlib.suppress(Exception):
                self._main.result(timeout_s)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout_s)
        self._loop.close()

    # --- on the loop -----------------------------------------------------------------------
    def _shutdown(self) -> None:
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
        self._wake.set()

    def _offer(self, job: FrameJob, arrived_s: float) -> None:
        self._seq += 1
        self._newest_stamp = job.stamp
        deadline_s = arrived_s + self.config.deadline_ms / 1000.0
        ticket = Ticket(self._seq, arrived_s, deadline_s, job)
        if self._gate.offer(ticket) is not None:
            self.monitor.count("frames_superseded")
        self._loop.call_later(max(deadline_s - time.monotonic(), 0.0), self._on_deadline, ticket)
        self._wake.set()

    def _on_deadline(self, ticket: Ticket[FrameJob]) -> None:
        if ticket.first_action_s is not None or ticket.superseded or ticket.missed:
            return
        ticket.missed = True
        self.monitor.deadline_missed()
        self._apply_on_late(ticket.job.stamp)
        if self.config.on_late is OnLate.STOP and self._gate.in_flight is ticket and self._task:
            self._task.cancel()

    def _apply_on_late(self, stamp: tuple[int, int] | None, failed: bool = False) -> None:
        """Sends the on_late command in place of the action for the frame stamped `stamp`."""
        width = self.config.action_width or self._server.action_dim
        command = late_command(self.config.on_late, self._last_action, width, stamp, failed)
        if command is None:
            return
        try:
            self._sink.publish_late(command)
        except ValueError as exc:
            self._sink.report("error", f"cannot send the on_late command: {exc}")
            return
        self.monitor.count("late_commands")

    async def _run_forever(self) -> None:
        client = VlaStreamClient(self.server_url, self._api_key, transport=self._transport)
        async with contextlib.aclosing(client):
            while not self._stopping:
                await self._ensure_server(client)
                if self._stopping:  # stopped while probing: the wait below would never end
                    break
                ticket = self._gate.take(time.monotonic())
                self.monitor.count("frames_stale", len(self._gate.drain_stale()))
                if ticket is None:
                    if self._gate.waiting is None:
                        self._wake.clear()
                        await self._wake.wait()
                    continue
                self._task = asyncio.create_task(self._process(client, ticket))
                await asyncio.wait([self._task])
                self._task = None
                self._gate.done(ticket)
                if self._outage:
                    await self._back_off()  # a failing server must not get a request per frame

    async def _ensure_server(self, client: VlaStreamClient) -> None:
        """Probes until /health and /get_server_info answer. That alone ends no outage: a
        server can answer /health and still fail every request."""
        while not self._server.ready and not self._stopping:
            try:
                if await client.health():
                    self._use_server_info(await client.server_info())
                    return
                reason = "health check failed"
            except ServerUnavailable as exc:
                reason = str(exc)
            self._server_unavailable(f"{self.server_url}: {reason}", self._newest_stamp)
            await self._back_off()

    async def _back_off(self) -> None:
        """Waits the next backoff delay (the delays grow until a request succeeds), or until
        stop."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._stop_requested(), self._backoff.next_delay())

    async def _stop_requested(self) -> None:
        while not self._stopping:
            await self._wake.wait()
            self._wake.clear()

    def _use_server_info(self, info: dict[str, Any]) -> None:
        mm = info.get("mm")
        digest = mm.get("preprocess_digest") if isinstance(mm, dict) else None
        self._server.multimodal = isinstance(digest, str)
        self._server.digest = bytes.fromhex(digest) if isinstance(digest, str) else None
        actions = mm.get("actions") if isinstance(mm, dict) else None
        dim = actions.get("action_dim") if isinstance(actions, dict) else None
        self._server.action_dim = dim if isinstance(dim, int) and dim > 0 else None
        token = mm.get("image_token") if isinstance(mm, dict) else None
        self._server.image_token = token if isinstance(token, str) else None
        robot = mm.get("robot") if isinstance(mm, dict) else None
        state_dim = robot.get("state_dim") if isinstance(robot, dict) else None
        self._server.state_dim = state_dim if isinstance(state_dim, int) else 0
        self._server.session = None  # a restarted server has lost its sessions
        self._server.ready = True
        if not self._server.multimodal:
            self._sink.report(
                "warn",
                "server has no image/action support (no 'mm' in /get_server_info): sending the "
                "instruction only, no actions will be published",
            )

    def _server_unavailable(self, reason: str, stamp: tuple[int, int] | None) -> None:
        self._outage = True
        if self.monitor.server_down(reason):
            self._sink.report("error", f"server unavailable: {reason}; applying on_late")
            self._apply_on_late(stamp, failed=True)

    def _request_rejected(self, reason: str, stamp: tuple[int, int]) -> None:
        self.monitor.count("frames_failed")
        self.monitor.request_error(reason)
        message = f"the server refuses the request: {reason}"
        if self.monitor.request_rejected(reason):
            self._sink.report("error", f"{message}; applying on_late")
            self._apply_on_late(stamp, failed=True)
        else:
            self._sink.report("error", message)

    def _request_succeeded(self) -> None:
        self._backoff.reset()
        outage, self._outage = self._outage, False
        if self.monitor.request_accepted():
            self._sink.report("info", "the server accepts the requests again")
        if self.monitor.server_up() and outage:
            self.monitor.count("reconnects")
            self._sink.report("info", f"server {self.server_url} is back")

    async def _open_session(self, client: VlaStreamClient, session: str) -> None:
        """Opens `session` before its first request: at connect, after a re-probe, and when the
        `session` parameter changes (a new episode)."""
        if not session or session == self._server.session:
            return
        try:
            await client.open_session(session)
        except RequestRejected as exc:
            # A server without sessions: the request's session_id is then refused as an unknown
            # field and dropped, so the frames still flow; asking again per frame cannot help.
            self._sink.report("warn", f"could not open session {session!r}: {exc}")
        self._server.session = session

    async def _process(self, client: VlaStreamClient, ticket: Ticket[FrameJob]) -> None:
        images = tuple(image.with_digest(self._server.digest) for image in ticket.job.images)
        rid = f"{self._rid_prefix}-{ticket.seq}"
        while True:
            budget = self._budget  # one snapshot per attempt: set_config may swap it
            settings = replace(
                self.config.request,
                num_actions=budget.num_actions,
                control_period_ms=budget.action_period_s * 1000.0,
            )
            executor = self.config.executor_times_actions
            due = budget.due_times(ticket.arrived_s, ticket.deadline_s, executor)
            # the server is asked to finish the whole chunk by its last action's due time
            remaining_ms = (due[-1] - time.monotonic()) * 1000.0
            if remaining_ms < MIN_DEADLINE_MS:
                self._chunk_too_late(ticket, due)
                return
            body = build_body(
                settings,
                images,
                rid=rid,
                remaining_ms=remaining_ms,
                multimodal=self._server.multimodal,
                support=self._server.support,
                image_token=self._server.image_token,
                state=ticket.job.state if self._server.state_dim else None,
                guidance=self._guidance(ticket),
                rtc_horizon=self.config.rtc_horizon,
            )
            try:
                await self._open_session(client, settings.session)
                await self._consume(client, ticket, body, due)
                return
            except RequestRejected as exc:
                if self._server.support.reject(exc.field):
                    continue  # an optional field this server does not know: resend without
                self._request_rejected(str(exc), ticket.job.stamp)
                return
            except ServerUnavailable as exc:
                self._server.ready = False  # re-probe (and reopen the session) before a retry
                self.monitor.count("frames_failed")
                self.monitor.request_error(str(exc))
                self._server_unavailable(str(exc), ticket.job.stamp)
                return

    async def _consume(
        self,
        client: VlaStreamClient,
        ticket: Ticket[FrameJob],
        body: dict[str, Any],
        due: list[float],
    ) -> None:
        timing = _StreamTiming(sent_s=time.monotonic())
        malformed_before = client.malformed_lines
        finish: dict[str, Any] = {}
        try:
            async for chunk in client.stream(body):
                self._on_chunk(ticket, chunk, timing)
                finish = chunk.finish_reason or finish
                if finish.get("type") in _FAILED_FINISH:
                    raise RequestRejected(0, str(finish.get("message", finish)), None)
        finally:
            self.monitor.count("malformed_sse_lines", client.malformed_lines - malformed_before)
        # The server ends a frame that cannot make its deadline early (maybe after some of its
        # actions), or its first action came after the deadline: a missed frame.
        expired = finish.get("type") == "deadline" or ticket.missed
        self.monitor.count("frames_expired" if expired else "frames_processed")
        self._request_succeeded()
        self._adapt(ticket, timing, due)

    def _chunk_too_late(self, ticket: Ticket[FrameJob], due: list[float]) -> None:
        """The frame waited past its chunk's last due time: no action of it could be applied,
        so it is not sent; the budget counts it as a chunk without an action."""
        self.monitor.count("frames_expired")
        self._adapt(ticket, _StreamTiming(sent_s=time.monotonic()), due)

    def _guidance(self, ticket: Ticket[FrameJob]) -> RtcGuidance | None:
        horizon = self.config.rtc_horizon
        return self._sink.rtc_guidance(ticket.job.stamp, horizon) if horizon > 0 else None

    def _adapt(self, ticket: Ticket[FrameJob], timing: _StreamTiming, due: list[float]) -> None:
        budget, executor = self._budget, self.config.executor_times_actions
        change = budget.observe(timing.arrived, due, ticket.arrived_s, executor)
        if change is None:
            return
        if budget.adapted_period_s is not None:
            self._sink.set_action_period(budget.adapted_period_s)
        self.monitor.loop_degraded(change)
        self._sink.report("warn", change)

    def _on_chunk(self, ticket: Ticket[FrameJob], chunk: StreamChunk, t: _StreamTiming) -> None:
        now = time.monotonic()
        if chunk.n_tokens:
            if t.last_token_s is None:
                self.monitor.record("ttft", (now - t.sent_s) * 1000.0)
            else:
                gap_ms = (now - t.last_token_s) * 1000.0 / chunk.n_tokens
                for _ in range(chunk.n_tokens):
                    self.monitor.record("itl", gap_ms)
            t.last_token_s = now
        for action in chunk.actions:
            t.arrived.append(now)
            self._publish(ticket, t, action)

    def _publish(
        self, ticket: Ticket[FrameJob], t: _StreamTiming, action: tuple[float, ...]
    ) -> None:
        if ticket.missed and not self.config.executor_times_actions:
            self.monitor.count("actions_late")  # its on_late command went out instead
            return
        try:
            self._sink.publish_action(ticket.job.stamp, t.actions, action)
        except ValueError as exc:
            self.monitor.request_error(f"action not published: {exc}")
            self._sink.report("error", f"action not published: {exc}")
            return
        published_s = time.monotonic()
        t.actions += 1
        self._last_action = action
        self.monitor.count("actions_published")
        if ticket.first_action_s is None:
            ticket.first_action_s = published_s
            self.monitor.record("time_to_first_action", (published_s - t.sent_s) * 1000.0)
            self.monitor.record("frame_to_action", (published_s - ticket.arrived_s) * 1000.0)


def _budget(config: WorkerConfig) -> ChunkBudget:
    return ChunkBudget(config.request.num_actions, config.request.control_period_ms / 1000.0)


@dataclass
class _StreamTiming:
    sent_s: float
    last_token_s: float | None = None
    actions: int = 0
    arrived: list[float] = field(default_factory=list)  # each action's arrival (monotonic)
