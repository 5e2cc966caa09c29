"""rclpy.logging: named loggers with rcutils' severities and once/throttle/skip_first filters.

Records go to Python's `logging` under `ros.<logger name>`, so pytest's caplog and any handler
the process installs see them; with no handler configured they print rcutils-style to stderr.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from enum import IntEnum
from typing import Any

_PREFIX = "ros"
_setup_lock = threading.Lock()
_handler_installed = False


class LoggingSeverity(IntEnum):
    UNSET = 0
    DEBUG = 10
    INFO = 20
    WARN = 30
    ERROR = 40
    FATAL = 50


_PY_LEVEL = {
    LoggingSeverity.UNSET: logging.NOTSET,
    LoggingSeverity.DEBUG: logging.DEBUG,
    LoggingSeverity.INFO: logging.INFO,
    LoggingSeverity.WARN: logging.WARNING,
    LoggingSeverity.ERROR: logging.ERROR,
    LoggingSeverity.FATAL: logging.CRITICAL,
}


def logger_name(record: logging.LogRecord) -> str:
    """The rcutils name of the logger that made `record` ('vla_bridge')."""
    return record.name.removeprefix(_PREFIX + ".")


class _RcutilsFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        severity = {"WARNING": "WARN", "CRITICAL": "FATAL"}.get(record.levelname, record.levelname)
        name = logger_name(record)
        return f"[{severity}] [{record.created:.9f}] [{name}]: {record.getMessage()}"


def _ensure_output() -> None:
    """rclpy prints INFO and above by default; do the same unless the process set up logging."""
    global _handler_installed
    with _setup_lock:
        if _handler_installed:
            return
        _handler_installed = True
        root_logger = logging.getLogger(_PREFIX)
        root_logger.setLevel(logging.INFO)
        if not logging.getLogger().handlers:
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(_RcutilsFormatter())
            root_logger.addHandler(handler)


class RcutilsLogger:
    """A node's logger: `info`, `warning`/`warn`, `error`, ... with rclpy's keyword filters."""

    def __init__(self, name: str = "") -> None:
        self.name = name
        self.py_logger = logging.getLogger(f"{_PREFIX}.{name}" if name else _PREFIX)
        self._sites: dict[tuple[str, int], list[Any]] = {}  # call site -> [calls, last log time]
        self._lock = threading.Lock()
        _ensure_output()

    def get_child(self, name: str) -> RcutilsLogger:
        if not name:
            raise ValueError("Child logger name must not be empty.")
        return RcutilsLogger(f"{self.name}.{name}" if self.name else name)

    def set_level(self, level: LoggingSeverity | int) -> None:
        self.py_logger.setLevel(_PY_LEVEL[LoggingSeverity(level)])

    def get_effective_level(self) -> LoggingSeverity:
        level = self.py_logger.getEffectiveLevel()
        return max((s for s, py in _PY_LEVEL.items() if py <= level), default=LoggingSeverity.UNSET)

    def is_enabled_for(self, severity: LoggingSeverity | int) -> bool:
        return self.py_logger.isEnabledFor(_PY_LEVEL[LoggingSeverity(severity)])

    def log(self, message: Any, severity: LoggingSeverity | int, **kwargs: Any) -> bool:
        """Logs unless a filter suppresses it; returns whether it was logged, as rclpy does."""
        return self._log(message, severity, kwargs)

    def _log(self, message: Any, severity: LoggingSeverity | int, kwargs: dict[str, Any]) -> bool:
        # Frames: _passes_filters <- _log <- (info | warning | ... | log) <- the call site.
        severity = LoggingSeverity(severity)
        if not self.is_enabled_for(severity) or not self._passes_filters(kwargs):
            return False
        self.py_logger.log(_PY_LEVEL[severity], "%s", message, stacklevel=3)
        return True

    def _passes_filters(self, kwargs: dict[str, Any]) -> bool:
        unknown = set(kwargs) - {
            "once",
            "throttle_duration_sec",
            "throttle_time_source_type",
            "skip_first",
            "name",
        }
        if unknown:
            raise TypeError(f"unsupported logging filter(s): {sorted(unknown)}")
        caller = sys._getframe(3)
        site = (caller.f_code.co_filename, caller.f_lineno)
        now = time.monotonic()
        with self._lock:
            calls, last = self._sites.setdefault(site, [0, None])
            self._sites[site][0] = calls + 1
            if kwargs.get("once") and calls > 0:
                return False
            if kwargs.get("skip_first") and calls == 0:
                return False
            throttle = kwargs.get("throttle_duration_sec")
            if throttle is not None and last is not None and now - last < throttle:
                return False
            self._sites[site][1] = now
        return True

    def debug(self, message: Any, **kwargs: Any) -> bool:
        return self._log(message, LoggingSeverity.DEBUG, kwargs)

    def info(self, message: Any, **kwargs: Any) -> bool:
        return self._log(message, LoggingSeverity.INFO, kwargs)

    def warning(self, message: Any, **kwargs: Any) -> bool:
        return self._log(message, LoggingSeverity.WARN, kwargs)

    warn = warning

    def error(self, message: Any, **kwargs: Any) -> bool:
        return self._log(message, LoggingSeverity.ERROR, kwargs)

    def fatal(self, message: Any, **kwargs: Any) -> bool:
        return self._log(message, LoggingSeverity.FATAL, kwargs)


def get_logger(name: str) -> RcutilsLogger:
    return RcutilsLogger(name)
