"""uvicorn's HTTP/1.1 protocol with two time bounds on slow and hostile clients.

uvicorn bounds a partial request's size (h11's 16 KiB for the request head; a body is read as the
route asks for it) but not its time: a connection that sends part of a request and trickles a
byte now and then (slowloris) is held forever, and so is one that stops reading its response.
The second is the costly one: the route's send waits on the full socket while the scheduler
keeps generating, the chunks queue in the request's state, and the KV stays held until the
connection closes, which a client that neither reads nor closes never does.

- **Request read** (`--request-read-timeout`): a request (head and body) must have arrived
  within this time of the connection opening or of the request's first byte; else the
  connection is closed. A keep-alive connection idle between requests is left to uvicorn's
  `timeout_keep_alive`.
- **Send stall** (`--send-timeout`): the connection's write buffer is limited to zero, so
  uvicorn's flow control pauses the response whenever the kernel's socket buffer is full, and
  the guard closes the connection if the client has not taken everything buffered within this
  time. A client that reads slowly but steadily keeps resuming it. Closing it is an abort, not a
  graceful close, which would wait to flush what the client never reads; uvicorn then reports
  the disconnect to the route, whose stream ends and aborts its request in the scheduler (the
  same path as a client that went away), so KV, request state and queued chunks are freed.
  One mechanism at the connection for every route: streams, and large replies too.

Both count in `vla_slow_client_aborts_total` by `phase` (request, response).

The protocol also hands uvicorn a transport that joins the writes of one event-loop turn
(`CoalescedWrites`): a streamed answer's head and its first chunk, written back to back, go out
in one send, so the client wakes once for both. Two sends woke a waiting client twice, and on a
loaded core the first wake-up (for the head alone) was in the time to first token: about 0.4 ms
of a repeated frame's 7.6 ms in `python -m vla_server.bench multimodal`.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from dataclasses import dataclass
from typing import Any

import h11
from prometheus_client import Counter
from uvicorn.protocols.http.h11_impl import H11Protocol

logger = logging.getLogger(__name__)

# The client still owes the rest of its request in these states.
_REQUEST_INCOMPLETE = (h11.IDLE, h11.SEND_BODY)
_LINGER_OFF = struct.pack("ii", 1, 0)


@dataclass(frozen=True)
class ClientTimeouts:
    request_read_s: float
    send_stall_s: float
    aborts: Counter  # labelled by phase


class GuardedH11Protocol(H11Protocol):
    """H11Protocol with the request-read deadline and the send-stall bound (module docstring);
    `guarded_h11_protocol` makes the class uvicorn instantiates per connection."""

    timeouts: ClientTimeouts

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._read_timer: asyncio.TimerHandle | None = None
        self._stall_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # Zero: paused as soon as the kernel holds back a byte, so a stall is seen at once and
        # the process keeps no more than one message per connection on top of the kernel's.
        transport.set_write_buffer_limits(high=0)
        # Flow control (uvicorn's, and the stall bound above) stays on the real transport.
        self.transport = CoalescedWrites(transport, self.loop)  # type: ignore[assignment]
        self._arm_read_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._read_timer is None and self.conn.their_state is h11.IDLE:
            self._arm_read_deadline()  # the first bytes of the connection's next request
        super().data_received(data)
        if self.conn.their_state not in _REQUEST_INCOMPLETE:
            self._cancel_read_deadline()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # A pipelined request that arrived during the response is read only now.
        if self.conn.their_state is h11.SEND_BODY or self.conn.trailing_data[0]:
            self._arm_read_deadline()

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        # The WebSocket protocol takes the connection over with its own ping timeout, on the
        # real transport.
        self._cancel_timers()
        if isinstance(self.transport, CoalescedWrites):
            self.transport = self.transport.unwrap()
        self.transport.set_write_buffer_limits()
        super().handle_websocket_upgrade(event)

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._stall_timer is None:
            self._stall_timer = self.loop.call_later(
                self.timeouts.send_stall_s, self._give_up, "response"
            )

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None

    def _arm_read_deadline(self) -> None:
        self._cancel_read_deadline()
        self._read_timer = self.loop.call_later(
            self.timeouts.request_read_s, self._read_deadline_passed
        )

    def _read_deadline_passed(self) -> None:
        self._read_timer = None
        if self.conn.their_state in _REQUEST_INCOMPLETE:
            self._give_up("request")

    def _give_up(self, phase: str) -> None:
        if self.transport.is_closing() and self.transport.get_write_buffer_size() == 0:
            return  # already on its way out
        self.timeouts.aborts.labels(phase).inc()
        peer = f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
        limit = "request-read" if phase == "request" else "send"
        logger.warning("closing %s's connection: its %s exceeded --%s-timeout", peer, phase, limit)
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            # Linger 0: a reset, so the kernel drops what the client never read instead of
            # keeping the orphaned socket to deliver it.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_OFF)
        self.transport.abort()

    def _cancel_read_deadline(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def _cancel_timers(self) -> None:
        self._cancel_read_deadline()
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None


class CoalescedWrites:
    """A transport whose writes in one event-loop turn leave as one `write` of the real
    transport, at the end of that turn; everything else is the real transport's."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop):
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def write(self, data: bytes) -> None:
        if not data:
            return
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(data)

    def flush(self) -> None:
        if not self._pending:
            return
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        self._pending = []
        self._transport.write(data)  # a closing transport drops it, as it would have

    def close(self) -> None:
        self.flush()  # a graceful close sends what was written before it
        self._transport.close()

    def abort(self) -> None:
        self._pending = []
        self._transport.abort()

    def unwrap(self) -> asyncio.Transport:
        """The real transport, with what was written so far handed to it."""
        self.flush()
        return self._transport


def guarded_h11_protocol(timeouts: ClientTimeouts) -> type[GuardedH11Protocol]:
    """The protocol class for `uvicorn.Config(http=...)`, bound to `timeouts`."""
    return type("GuardedH11Protocol", (GuardedH11Protocol,), {"timeouts": timeouts})
