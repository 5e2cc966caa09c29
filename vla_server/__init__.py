"""vla-server: a serving node for vision-language-action models inside robot control loops."""

from __future__ import annotations

from typing import Any

__all__ = ["Engine", "ServerArgs"]


def __getattr__(name: str) -> Any:
    # Lazy: `import vla_server` stays cheap (no torch/transformers) for clients and the ROS bridge.
    if name == "Engine":
        from vla_server.entrypoints.engine import Engine

        return Engine
    if name == "ServerArgs":
        from vla_server.config import ServerArgs

        return ServerArgs
    raise AttributeError(name)
