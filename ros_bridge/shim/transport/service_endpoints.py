"""A service's endpoints (request reader, reply writer) and a client's (request writer, reply
reader) over any transport's readers and writers, framed as rmw_cyclonedds frames them."""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable
from typing import Any

from ros_bridge.shim.cdr import CdrError
from ros_bridge.shim.service_wire import RequestHeader, frame, unframe
from ros_bridge.shim.transport.base import Reader, ReplyDeliver, RequestDeliver, Writer

_log = logging.getLogger(__name__)


class _Framed:
    """The reader and writer of one side; `gids` is (reader, writer)."""

    def __init__(self) -> None:
        self.reader: Reader | None = None
        self.writer: Writer | None = None

    def _unframe(self, payload: bytes) -> tuple[RequestHeader, bytes] | None:
        try:
            return unframe(payload)
        except CdrError as exc:
            _log.warning("dropping a malformed service sample: %s", exc)
            return None

    @property
    def gids(self) -> tuple[bytes, bytes]:
        assert self.reader is not None and self.writer is not None
        return self.reader.gid, self.writer.gid

    def close(self) -> None:
        for endpoint in (self.reader, self.writer):
            if endpoint is not None:
                endpoint.close()


class FramedServer(_Framed):
    """Hands each request to `deliver`; `before_reply(source)` may wait until the client can
    receive the reply (DDS: its reply reader is matched)."""

    def __init__(
        self, deliver: RequestDeliver, before_reply: Callable[[Any], None] | None = None
    ) -> None:
        super().__init__()
        self._deliver = deliver
        self._before_reply = before_reply

    def attach(self, reader: Reader, writer: Writer) -> None:
        self.reader, self.writer = reader, writer

    def on_request(self, payload: bytes, source: Any = None) -> None:
        if (framed := self._unframe(payload)) is not None:
            self._deliver(*framed, source)

    def reply(self, header: RequestHeader, sample: bytes, source: Any) -> None:
        assert self.writer is not None
        if self._before_reply is not None:
            self._before_reply(source)
        self.writer.write(frame(header, sample))


class FramedClient(_Framed):
    """Numbers its requests and keeps the replies that carry its `client_id`."""

    def __init__(self, deliver: ReplyDeliver, ready: Callable[[], bool] | None = None) -> None:
        super().__init__()
        self._deliver = deliver
        self._ready = ready
        self._numbers = itertools.count(1)
        self._lock = threading.Lock()
        self.client_id = 0

    def attach(self, writer: Writer, reader: Reader, client_id: int) -> None:
        self.writer, self.reader, self.client_id = writer, reader, client_id

    def on_reply(self, payload: bytes, source: Any = None) -> None:
        framed = self._unframe(payload)
        if framed is not None and framed[0].guid == self.client_id:  # all clients read all replies
            self._deliver(framed[0].seq, framed[1])

    def request(self, sample: bytes) -> int:
        """Sends a request; returns its number."""
        assert self.writer is not None
        with self._lock:
            seq = next(self._numbers)
        self.writer.write(frame(RequestHeader(self.client_id, seq), sample))
        return seq

    def is_ready(self) -> bool:
        """A service's request reader and reply writer are both matched."""
        assert self.reader is not None and self.writer is not None
        if self._ready is not None:
            return self._ready()
        return self.writer.matched_count() > 0 and self.reader.matched_count() > 0
