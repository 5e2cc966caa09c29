"""Robot sessions in the scheduler: prompt rebuilding from a parent turn, and prefix pins.

A turn with `session_params` gets the prompt parent input + parent output (cut by `offset`,
without the output when `drop_previous_output`) + its own new tokens, so the radix cache finds
the parent's KV. An open session pins its latest turn's tree path, so its context is not
evicted while the session lives; the pins of all sessions are bounded by
`--max-session-held-tokens`, oldest sessions losing theirs first.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from vla_server.io_struct import MMItem, SessionParams
from vla_server.mem_cache.radix_cache import PinHandle, RadixCache
from vla_server.scheduler.req import Req


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
    last_active: float
    turns: dict[str, Turn] = field(default_factory=dict)  # insertion order = turn order
    pin: PinHandle | None = None


@dataclass
class NewTurn:
    session: Session
    rid: str
    turn: Turn
    keep: set[str] | None  # with `replace`: the turns that stay


class SessionController:
    def __init__(
        self,
        tree: RadixCache,
        max_held_tokens: int,
        bos_token_id: int | None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.tree = tree
        self.max_held_tokens = max_held_tokens
        self.bos_token_id = bos_token_id
        self.clock = clock  # monotonic seconds: idle timeouts
        self.sessions: dict[str, Session] = {}

    def open(self, session_id: str, capacity: int, timeout: float | None) -> None:
        if session_id in self.sessions:
            raise SessionError(f"session {session_id!r} is already open")
        self.sessions[session_id] = Session(session_id, capacity, timeout, self.clock())

    def close(self, session_id: str) -> None:
        session = self.sessions.pop(session_id, None)
        if session is None:
            raise SessionError(f"unknown session {session_id!r}")
        if session.pin is not None:
            self.tree.unpin(session.pin)

    def rebuild(self, req: Req, params: SessionParams, superseded: Collection[str] = ()) -> NewTurn:
        """Give `req` (carrying only its new tokens) the prompt of its session turn; the turns
        in `superseded` (waiting, about to be superseded by `req`) are skipped as its parent.
        The session is unchanged until `add_turn`."""
        session = self.sessions.get(params.id)
        if session is None:
            raise SessionError(f"unknown or closed session {params.id!r}")
        parent = self._parent(session, params, superseded)
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
        capacity = session.capacity_of_str_len  # in tokens; 0: unbounded
        if capacity and shift + len(new_ids) > capacity:
            raise SessionError(
                f"session {session.id!r} would hold {shift + len(new_ids)} tokens, over its "
                f"capacity_of_str_len {capacity}"
            )
        req.origin_input_ids = base_ids + new_ids
        keep = self._turns_up_to(session, params.rid) if params.replace else None
        return NewTurn(session, req.rid, Turn(req.origin_input_ids, req.mm_items), keep)

    def add_turn(self, new: NewTurn) -> None:
        """Record a rebuilt turn once the scheduler accepted its request (a rejected one must
        leave the session as it was)."""
        session = new.session
        if new.keep is not None:  # `replace`: the turns after the parent go
            session.turns = {k: t for k, t in session.turns.items() if k in new.keep}
        session.turns[new.rid] = new.turn
        session.last_active = self.clock()

    def _parent(
        self, session: Session, params: SessionParams, superseded: Collection[str]
    ) -> Turn | None:
        if params.rid is not None:
            parent = session.turns.get(params.rid)
            if parent is None:
                raise SessionError(
                    f"session {session.id!r} has no turn {params.rid!r}", "session_params.rid"
                )
        elif params.replace:
            return None
        else:
            latest = [t for rid, t in session.turns.items() if rid not in superseded]
            if not latest:
                return None
            parent = latest[-1]
        if not parent.finished:
            raise SessionError(
                f"session {session.id!r} is busy: its parent turn has not finished",
                "session_params.rid" if params.rid is not None else "session_params.id",
            )
        return parent

    @staticmethod
    def _turns_up_to(session: Session, rid: str | None) -> set[str]:
        keys = list(session.turns)
        return set(keys[: keys.index(rid) + 1] if rid is not None else [])

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
        session.last_active = self.clock()
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

    def reap(self) -> list[str]:
        """Close the sessions idle past their timeout; returns their ids."""
        now = self.clock()
        idle = [
            s.id
            for s in self.sessions.values()
            if s.timeout is not None and now - s.last_active > s.timeout
        ]
        for sid in idle:
            self.close(sid)
        return idle

    def drop_pins(self) -> None:
        """After a cache flush every pin is gone."""
        for s in self.sessions.values():
            s.pin = None
