"""rclpy.callback_groups: which callbacks an executor may run at the same time.

Executors call `can_execute`/`beginning_execution`/`ending_execution` under their context's
lock, so the groups keep no lock of their own.
"""

from __future__ import annotations

import weakref
from typing import Any


class CallbackGroup:
    """The entities (timers, subscriptions) whose callbacks belong to this group."""

    def __init__(self) -> None:
        self.entities: weakref.WeakSet[Any] = weakref.WeakSet()

    def add_entity(self, entity: Any) -> None:
        self.entities.add(entity)

    def has_entity(self, entity: Any) -> bool:
        return entity in self.entities

    def can_execute(self, entity: Any) -> bool:
        raise NotImplementedError

    def beginning_execution(self, entity: Any) -> bool:
        raise NotImplementedError

    def ending_execution(self, entity: Any) -> None:
        raise NotImplementedError


class ReentrantCallbackGroup(CallbackGroup):
    """Any number of its callbacks may run at once (under a MultiThreadedExecutor)."""

    def can_execute(self, entity: Any) -> bool:
        return True

    def beginning_execution(self, entity: Any) -> bool:
        return True

    def ending_execution(self, entity: Any) -> None:
        pass


class MutuallyExclusiveCallbackGroup(CallbackGroup):
    """One of its callbacks at a time; every node's default group."""

    def __init__(self) -> None:
        super().__init__()
        self._active: Any = None

    def can_execute(self, entity: Any) -> bool:
        return self._active is None

    def beginning_execution(self, entity: Any) -> bool:
        if self._active is not None:
            return False
        self._active = entity
        return True

    def ending_execution(self, entity: Any) -> None:
        if self._active is entity:
            self._active = None
