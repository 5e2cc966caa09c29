"""Robot sessions in the scheduler: prompt rebuilding from a parent turn, and prefix pins.

A turn with `session_params` gets the prompt parent input + parent output (cut by `offset`,
without the output when `drop_previous_output`) + its own new tokens, so the radix cache finds
the parent's KV. An open session pins its latest turn's tree path, so its context is not
evicted while the session lives; the pins of all sessions are bounded by
`--max-session-held-tokens`, oldest sessions losing theirs first.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from vla_server.io_struct import MMItem, SessionParams
from vla_server.managers.req import Req
from vla_server.mem_cache.radix_cache import PinHandle, RadixCache


class SessionError(ValueError):
    def __init__(self, message: str, field: str = "session_params.id"):
        super().__init__(message)
        self.field = field


@dataclass
class Turn:
    input_ids: list[int]
    mm_items: list[MMItem]
    output_ids: list[int] = field(default_factory=list)
    finished: bool = False


@dataclass
class Session:
    id: str
    capacity_of_str_len: int
    timeout: float | None
    last_active: float = field(default_factory=time.monotonic)
    turns: dict[str, Turn] = field(default_factory=dict)  # insertion order = turn order
    pin: PinHandle | None = None


class SessionController:
    def __init__(self, tree: RadixCache, max_held_tokens: int, bos_token_id: int | None):
        self.tree = tree
        self.max_held_tokens = max_held_tokens
        self.bos_token_id = bos_token_id
        self.sessions: dict[str, Session] = {}

    def open(self, session_id: str, capacity: int, timeout: float | None) -> None:
        if session_id in self.sessions:
            raise SessionError(f"session {session_id!r} is already open")
        self.sessions[session_id] = Session(session_id, capacity, timeout)

    def close(self, session_id: str) -> None:
        session = self.sessions.pop(session_id, None)
        if session is None:
            raise SessionError(f"unknown session {session_id!r}")
        if session.pin is not None:
            self.tree.unpin(session.pin)

    def rebuild(self, req: Req, params: SessionParams) -> None:
        """Give `req` (carrying only its new tokens) the prompt of its session turn."""
        session = self.sessions.get(params.id)
        if session is None:
            raise SessionError(f"unknown or closed session {params.id!r}")
        parent = self._parent(session, params)
        if params.replace:
            self._drop_turns_after(session, params.rid)
        base_ids, base_mm = ([], []) if parent is None else self._context(parent, params)
        new_ids = req.origin_input_ids
        if base_ids and new_ids and new_ids[0] == self.bos_token_id:
            new_ids = new_ids[1:]  # the context already starts with BOS
        shift = len(base_ids)
        req.mm_items = base_mm + [
            MMItem(
                it.hash,
                it.offset + shift - (len(req.origin_input_ids) - len(new_ids)),
                it.length,
                it.pixel_values,
            )
            for it in req.mm_items
        ]
        req.origin_input_ids = base_ids + new_ids
        session.turns[req.rid] = Turn(req.origin_input_ids, req.mm_items)
        session.last_active = time.monotonic()

    def _parent(self, session: Session, params: SessionParams) -> Turn | None:
        if params.rid is not None:
            parent = session.turns.get(params.rid)
            if parent is None:
                raise SessionError(
                    f"session {session.id!r} has no turn {params.rid!r}", "session_params.rid"
                )
        elif params.replace or not session.turns:
            return None
        else:
            parent = next(reversed(session.turns.values()))
        if not parent.finished:
            raise SessionError(
                f"session {session.id!r} is busy: its parent turn has not finished",
                "session_params.rid" if params.rid is not None else "session_params.id",
            )
        return parent

    def _drop_turns_after(self, session: Session, rid: str | None) -> None:
        keys = list(session.turns)
        keep = keys[: keys.index(rid) + 1] if rid is not None else []
        session.turns = {k: session.turns[k] for k in keep}

    @staticmethod
    def _context(parent: Turn, params: SessionParams) -> tuple[list[int], list[MMItem]]:
        ids = parent.input_ids + ([] if params.drop_previous_output else parent.output_ids)
        if params.offset is not None:
            if not 0 <= params.offset <= len(ids):
                raise SessionError(
                    f"offset {params.offset} outside the context of {len(ids)} tokens",
                    "session_params.offset",
                )
            ids = ids[: params.offset]
        items = [it for it in parent.mm_items if it.offset + it.length <= len(ids)]
        return ids, items

    def end_unrun(self, req: Req) -> None:
        """A turn that ended before it ran (deadline, supersede, abort, rejection while waiting)
        leaves no context: forget it, so the session continues from the turn before."""
        session = self.sessions.get(req.session_id or "")
        turn = session.turns.get(req.rid) if session is not None else None
        if turn is None or turn.finished:
            return
        if req.output_ids:  # it ran before being retracted: keep what it produced
            turn.output_ids = list(req.output_ids)
            turn.finished = True
        else:
            del session.turns[req.rid]  # type: ignore[union-attr]

    def on_finish(self, req: Req, key: list[int]) -> None:
        """Record the turn's output and pin its cached path (call after its KV went to the tree)."""
        session = self.sessions.get(req.session_id or "")
        if session is None:
            return
        turn = session.turns.get(req.rid)
        if turn is not None:
            turn.output_ids = list(req.output_ids)
            turn.finished = True
        session.last_active = time.monotonic()
        if not req.cacheable or self.tree.disable:
            return
        node = self.tree.match_prefix(key).last_node
        if session.pin is not None:
            self.tree.unpin(session.pin)
        session.pin = self.tree.pin(node, owner=session.id)
        for handle in self.tree.release_pins_over(self.max_held_tokens):
            owner = self.sessions.get(str(handle.owner))
            if owner is not None and owner.pin is handle:
                owner.pin = None

    def unpin_oldest_for(self, tokens: int) -> int:
        """Release the oldest sessions' pins until `tokens` more KV became evictable (or no pin
        is left); returns how many did."""
        gained = 0
        while gained < tokens:
            pins = self.tree.pins()
            if not pins:
                break
            before = self.tree.evictable_size()
            self.tree.unpin(pins[0])
            owner = self.sessions.get(str(pins[0].owner))
            if owner is not None and owner.pin is pins[0]:
                owner.pin = None
            gained += self.tree.evictable_size() - before
        return gained

    def reap(self, now: float | None = None) -> list[str]:
        now = time.monotonic() if now is None else now
        idle = [
            s.id
            for s in self.sessions.values()
            if s.timeout is not None and now - s.last_active > s.timeout
        ]
        for sid in idle:
            self.close(sid)
        return idle

    def pinned_tokens(self) -> int:
        return self.tree.pinned_size()

    def drop_pins(self) -> None:
        """After a cache flush every pin is gone."""
        for s in self.sessions.values():
            s.pin = None
