"""What the HTTP app needs of a running node: its front end, its configuration, the scheduler's
start-up report, and a way to stop it. `entrypoints.engine.Node` is the one implementation; the
front end never imports the launcher (which imports every process package)."""

from __future__ import annotations

from typing import Any, Protocol

from vla_server.config import ServerArgs
from vla_server.frontend.tokenizer_manager import TokenizerManager


class NodeHandle(Protocol):
    server_args: ServerArgs
    tokenizer_manager: TokenizerManager
    scheduler_info: dict[str, Any]

    def shutdown(self) -> None: ...
