"""CoalescedWrites on a real asyncio transport over a socket pair: the writes of one event-loop
turn reach the peer together when the turn ends, in order; a close sends them first, an abort
drops them; everything else is the real transport's."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

from vla_server.entrypoints.http_guard import CoalescedWrites


def _run(body: Callable[[CoalescedWrites, socket.socket], Awaitable[None]]) -> None:
    async def main() -> None:
        ours, peer = socket.socketpair()
        peer.setblocking(False)
        loop = asyncio.get_running_loop()
        transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, ours)
        try:
            await body(CoalescedWrites(transport, loop), peer)
        finally:
            transport.abort()
            peer.close()

    asyncio.run(main())


def _received(peer: socket.socket) -> bytes:
    try:
        return peer.recv(1 << 16)
    except BlockingIOError:
        return b"<nothing>"


async def _next_turns() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


def test_one_turns_writes_leave_together_when_it_ends():
    async def body(writes: CoalescedWrites, peer: socket.socket) -> None:
        writes.write(b"HTTP/1.1 200 OK\r\n\r\n")
        writes.write(b"")
        writes.write(b"data: {}\n\n")
        assert _received(peer) == b"<nothing>"  # still this turn
        await _next_turns()
        assert _received(peer) == b"HTTP/1.1 200 OK\r\n\r\ndata: {}\n\n"
        writes.write(b"data: [DONE]\n\n")
        await _next_turns()
        assert _received(peer) == b"data: [DONE]\n\n"

    _run(body)


def test_close_sends_what_was_written_then_ends():
    async def body(writes: CoalescedWrites, peer: socket.socket) -> None:
        writes.write(b"last words")
        writes.close()
        assert writes.is_closing()  # the real transport's answer
        await _next_turns()
        assert _received(peer) == b"last words"
        assert _received(peer) == b""  # end of stream

    _run(body)


def test_abort_drops_what_was_not_sent():
    async def body(writes: CoalescedWrites, peer: socket.socket) -> None:
        writes.write(b"never sent")
        writes.abort()
        await _next_turns()
        assert _received(peer) == b""

    _run(body)


def test_unwrap_hands_over_the_written_bytes_and_the_real_transport():
    async def body(writes: CoalescedWrites, peer: socket.socket) -> None:
        writes.write(b"upgrade")
        real = writes.unwrap()
        assert isinstance(real, asyncio.Transport)
        assert real.get_extra_info("socket") is writes.get_extra_info("socket")
        assert _received(peer) == b"upgrade"

    _run(body)
