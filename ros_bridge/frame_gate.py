"""One frame in flight per session, the newest one waiting (ROS-free, single-threaded).

A robot wants an action for the *latest* picture: when frames arrive faster than the model
answers, a waiting frame is replaced by a newer one (superseded) instead of queueing behind it,
and a frame that waited past its deadline is dropped (stale) rather than sent late.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass
class Ticket(Generic[T]):
    seq: int
    arrived_s: float  # monotonic clock
    deadline_s: float  # arrived_s + deadline
    job: T
    first_action_s: float | None = None
    superseded: bool = False
    missed: bool = False


@dataclass
class FrameGate(Generic[T]):
    in_flight: Ticket[T] | None = None
    waiting: Ticket[T] | None = None
    stale: list[Ticket[T]] = field(default_factory=list)

    def offer(self, ticket: Ticket[T]) -> Ticket[T] | None:
        """Queues `ticket`; returns the waiting ticket it supersedes, if any."""
        previous, self.waiting = self.waiting, ticket
        if previous is not None:
            previous.superseded = True
        return previous

    def take(self, now_s: float) -> Ticket[T] | None:
        """The ticket to send now (it becomes in flight), or None.

        None while another is in flight. Waiting tickets past their deadline go to `stale`.
        """
        if self.in_flight is not None or self.waiting is None:
            return None
        ticket, self.waiting = self.waiting, None
        if now_s >= ticket.deadline_s:
            self.stale.append(ticket)
            return None
        self.in_flight = ticket
        return ticket

    def done(self, ticket: Ticket[T]) -> None:
        if self.in_flight is ticket:
            self.in_flight = None

    def drain_stale(self) -> list[Ticket[T]]:
        dropped, self.stale = self.stale, []
        return dropped
