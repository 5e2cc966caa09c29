"""What the HTTP app needs of a running node: its front end, the front end's configuration, the
scheduler's start-up report, and a way to stop it. `entrypoints.engine.Node` is the one
implementation; the front end never imports the launcher (which imports every process package)."""

from __future__ import annotations

from typing import Any, Protocol

from vla_server.config import FrontendConfig
from vla_server.frontend.tokenizer_manager import TokenizerManager


class NodeHandle(Protocol):
    tokenizer_manager: TokenizerManager
    scheduler_info: dict[str, Any]

    @property
    def config(self) -> FrontendConfig: ...

    def arguments(self) -> dict[str, Any]:
        """Every argument the node was started with (secrets masked): GET /get_server_info
        reports them; nothing in the front end decides on them."""
        ...

    def shutdown(self) -> None: ...
