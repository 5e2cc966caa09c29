"""`vla-server serve`: start the node, serve its HTTP app with uvicorn, drain on a signal."""

from __future__ import annotations

import logging
import os
import signal
from multiprocessing.process import BaseProcess
from typing import Any

import uvicorn

from vla_server import cpu_placement
from vla_server.config import ServerArgs
from vla_server.entrypoints.engine import Node, launch_node, stop_processes
from vla_server.entrypoints.http_guard import ClientTimeouts, guarded_h11_protocol
from vla_server.frontend.http_server import create_app

logger = logging.getLogger(__name__)


def _exit_on_child_failure(node: Node) -> Any:
    """A child that died or hung takes the node down: exit 1, the others stopped, /health
    answering 503 with the reason until the port closes."""

    def on_failure(p: BaseProcess, reason: str) -> None:
        logger.error("%s; shutting the node down", reason)
        node.tokenizer_manager.mark_dead_threadsafe(reason)
        p.kill()  # a hung child may never act on SIGTERM; a dead one is already reaped
        stop_processes([q for q in node.procs if q is not p])
        node.port_args.cleanup()
        os._exit(1)

    return on_failure


def _exit_0_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(0)


def run_server(server_args: ServerArgs) -> None:
    """Serve until SIGTERM or SIGINT, then drain and exit 0.

    The drain is uvicorn's graceful shutdown: no new connections, in-flight requests (streams
    too) run to their end for up to --graceful-shutdown-timeout seconds, then the ones still
    running are cancelled, which aborts them in the scheduler; then the lifespan stops the node.
    uvicorn re-delivers the signal it drained for to the handler installed before it (the
    default one would make the exit code -15 or a KeyboardInterrupt), so the handlers set here
    turn that into a clean exit 0. They also make a signal during start-up a clean stop.
    """
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _exit_0_on_signal)
    node = launch_node(server_args)
    # The HTTP server's process is the front end: it keeps to the cores the scheduler left it
    # (an in-process Engine leaves its host program where it is).
    if node_cpus := node.scheduler_info.get("node_cpus"):
        cpu_placement.keep_process_to(tuple(node_cpus))
    launch = node.configs.launch
    try:
        node.start_watchdog(_exit_on_child_failure(node))
        app = create_app(node)
        timeouts = ClientTimeouts(
            launch.request_read_timeout,
            launch.send_timeout,
            node.tokenizer_manager.metrics.slow_client_aborts,
        )
        config = uvicorn.Config(
            app,
            http=guarded_h11_protocol(timeouts),
            host=launch.host,
            port=launch.port,
            log_level=launch.log_level,
            timeout_graceful_shutdown=int(launch.graceful_shutdown_timeout),
            ws_max_size=node.configs.frontend.max_request_bytes,
            access_log=False,
        )
        uvicorn.Server(config).run()
    finally:
        node.shutdown()  # idempotent; covers a failure or a signal before the lifespan ran
