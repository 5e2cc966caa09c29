"""rclpy.task.Future: a result that arrives later (a service call's response), from any thread.

As rclpy's: `result()` does not block (None until done; the exception if one was set), done
callbacks run once, when the future completes (at once if it already has).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class Future:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done = False
        self._cancelled = False
        self._result: Any = None
        self._exception: BaseException | None = None
        self._callbacks: list[Callable[[Future], None]] = []

    def done(self) -> bool:
        return self._done

    def cancelled(self) -> bool:
        return self._cancelled

    def result(self) -> Any:
        if self._exception is not None:
            raise self._exception
        return self._result

    def exception(self) -> BaseException | None:
        return self._exception

    def set_result(self, result: Any) -> None:
        self._complete(result=result)

    def set_exception(self, exception: BaseException) -> None:
        self._complete(exception=exception)

    def cancel(self) -> None:
        self._complete(cancelled=True)

    def add_done_callback(self, callback: Callable[[Future], None]) -> None:
        with self._lock:
            if not self._done:
                self._callbacks.append(callback)
                return
        callback(self)

    def _complete(
        self, result: Any = None, exception: BaseException | None = None, cancelled: bool = False
    ) -> None:
        with self._lock:
            if self._done:
                return
            self._result, self._exception, self._cancelled = result, exception, cancelled
            self._done = True
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self)
