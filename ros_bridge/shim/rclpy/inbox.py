"""What a transport hands an executor entity (a subscription's samples, a service's requests, a
client's replies): a queue changed under the context's guard, whose every change notifies it, so
executors sleeping on the guard see new work (shim detail, not rclpy API)."""

from __future__ import annotations

import threading
from collections import deque
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ros_bridge.shim.message import ServiceType
    from ros_bridge.shim.rclpy.callback_groups import CallbackGroup
    from ros_bridge.shim.rclpy.qos import QoSProfile


class Inbox:
    def __init__(self, guard: threading.Condition, maxlen: int | None = None) -> None:
        self._guard = guard
        self._queue: deque[Any] = deque(maxlen=maxlen)  # maxlen: KEEP_LAST drops the oldest
        self.destroyed = False

    def put(self, item: Any) -> None:
        """Called by the transport, from any thread."""
        with self._guard:
            if not self.destroyed:
                self._queue.append(item)
                self._guard.notify_all()

    def has_pending(self) -> bool:
        return bool(self._queue)

    def take(self) -> Any:
        """The oldest item (None when empty); the caller holds the context guard."""
        return self._queue.popleft() if self._queue else None

    def close_inbox(self) -> None:
        with self._guard:
            self.destroyed = True
            self._queue.clear()


class ServiceInbox(Inbox):
    """What a Service and a Client share: the service's type and name, their callback group and
    QoS, and the transport endpoints (`attach`), which `destroy` closes."""

    def __init__(
        self,
        srv_type: type[ServiceType],
        srv_name: str,
        callback_group: CallbackGroup,
        qos_profile: QoSProfile,
        guard: threading.Condition,
    ) -> None:
        super().__init__(guard)
        self.srv_type = srv_type
        self.callback_group = callback_group
        self.qos_profile = qos_profile
        self._srv_name = srv_name
        self._endpoint: Any = None

    def attach(self, endpoint: Any) -> None:
        self._endpoint = endpoint

    @property
    def gids(self) -> tuple[bytes, ...]:
        return self._endpoint.gids if self._endpoint is not None else ()

    @property
    def srv_name(self) -> str:
        return self._srv_name

    def destroy(self) -> None:
        self.close_inbox()
        if self._endpoint is not None:
            self._endpoint.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self._srv_name!r}, srv_type={self.srv_type.__name__})"
