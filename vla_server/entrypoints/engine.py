"""The Engine API, and starting/stopping the three processes of one node.

Order (as SGLang): the scheduler first (it loads the model, slowest), then the detokenizer, then
the TokenizerManager in this process; then wait for the scheduler's readiness handshake. A child
that dies while loading fails start-up at once with its exit code instead of hanging.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing as mp
import os
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as mp_wait
from multiprocessing.process import BaseProcess
from typing import Any

from vla_server.config import FrontendConfig, NodeConfig, PortArgs, ServerArgs
from vla_server.detokenizer.detokenizer_manager import run_detokenizer_process
from vla_server.frontend.generate_request import GenerateItem, from_kwargs, normalize
from vla_server.frontend.stream_output import stream_shaper
from vla_server.frontend.tokenizer_manager import TokenizerManager
from vla_server.frontend.watchdog import SubprocessWatchdog
from vla_server.process_utils import CHECKPOINT_ERRORS, Heartbeat, freeze_startup_heap
from vla_server.scheduler.process import run_scheduler_process

logger = logging.getLogger(__name__)

READY_POLL_S = 0.25


class StartupError(RuntimeError):
    pass


@dataclass
class Node:
    server_args: ServerArgs  # for arguments() only: each process reads its own config
    configs: NodeConfig
    port_args: PortArgs
    tokenizer_manager: TokenizerManager
    procs: list[BaseProcess]
    heartbeats: list[Heartbeat]  # one per process of `procs`, in the same order
    scheduler_info: dict[str, Any]
    watchdog: SubprocessWatchdog | None = None
    stopped: bool = False

    @property
    def config(self) -> FrontendConfig:
        return self.configs.frontend

    def arguments(self) -> dict[str, Any]:
        return self.server_args.to_dict()

    def start_watchdog(self, on_failure: Callable[[BaseProcess, str], None]) -> None:
        """Watch the children from now on: `on_failure(process, reason)` once, when one dies
        or hangs (see frontend/watchdog.py)."""
        launch = self.configs.launch
        self.watchdog = SubprocessWatchdog(
            list(zip(self.procs, self.heartbeats, strict=True)),
            on_failure,
            launch.watchdog_interval,
            launch.watchdog_timeout,
        )
        self.watchdog.start()

    def shutdown(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        if self.watchdog is not None:
            self.watchdog.stop()
        stop_processes(self.procs)
        self.tokenizer_manager.close()
        self.port_args.cleanup()


def resolve_model_path(args: ServerArgs) -> ServerArgs:
    if args.model_path is not None:
        return args
    from vla_server.policies.registry import default_checkpoint

    return replace(args, model_path=str(default_checkpoint()))


def stop_processes(procs: list[BaseProcess], timeout: float = 3.0) -> None:
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(timeout)
        if p.is_alive():
            p.kill()
            p.join(1)


def _set_omp_wait() -> None:
    """How OpenMP threads wait at a barrier, for the scheduler (it inherits this environment;
    libgomp reads it when torch loads); a user's wait policy or spin count wins.

    Spinning long (libgomp's default, ~ms) makes a multi-threaded step pathological when
    another process holds a core (a 512-token prefill on 2 threads took 0.8 s instead of 55 ms
    on a loaded 2-core machine); sleeping at once costs a futex wake-up per parallel region, and
    a lone robot's denoising steps are ~1500 small regions per chunk (a mid-size denoising
    policy on 2 cores: its action-head passes took 170 ms served, 130 ms in process). A short
    spin (2000 pauses, tens of microseconds) keeps both: 340 ms per chunk served instead of 400
    on an idle machine, about the same with a busy core."""
    if "OMP_WAIT_POLICY" not in os.environ:
        os.environ.setdefault("GOMP_SPINCOUNT", "2000")


def launch_node(server_args: ServerArgs) -> Node:
    args = resolve_model_path(server_args)
    configs = args.configs()
    port_args = PortArgs.init_new()
    ctx = mp.get_context("spawn")
    sched_reader, sched_writer = ctx.Pipe(duplex=False)
    detok_reader, detok_writer = ctx.Pipe(duplex=False)
    info_reader, info_writer = ctx.Pipe(duplex=False)  # the scheduler's ModelInfo, to the detok
    parent = os.getpid()
    heartbeats = [Heartbeat(ctx), Heartbeat(ctx)]
    sched = ctx.Process(
        target=run_scheduler_process,
        args=(configs.scheduler, configs.model, port_args, sched_writer, parent, heartbeats[0]),
        name="scheduler",
    )
    detok = ctx.Process(
        target=run_detokenizer_process,
        args=(configs.detokenizer, port_args, info_reader, detok_writer, parent, heartbeats[1]),
        name="detokenizer",
    )
    procs: list[BaseProcess] = [sched, detok]
    tm = None
    _set_omp_wait()
    try:
        sched.start()
        sched_writer.close()
        detok.start()
        detok_writer.close()
        info_reader.close()
        tm = TokenizerManager(configs.frontend, port_args)
        # The scheduler detects the checkpoint's family; the others build it from its report.
        info = wait_for_ready({sched: sched_reader})["scheduler"]
        info_writer.send(info)
        info_writer.close()
        wait_for_ready({detok: detok_reader})
        tm.set_model_info(info)
    except BaseException as e:
        stop_processes(procs)
        if tm is not None:
            tm.close()
        port_args.cleanup()
        if isinstance(e, CHECKPOINT_ERRORS):
            raise StartupError(f"front end failed to start: {type(e).__name__}: {e}") from e
        raise
    logger.info(
        "node ready: model %s, KV pool %d tokens, context %d",
        args.model_path,
        info.max_total_num_tokens,
        info.context_len,
    )
    freeze_startup_heap()  # the front end's share of the GC pauses, see process_utils
    return Node(args, configs, port_args, tm, procs, heartbeats, info.server_info())


def wait_for_ready(readers: dict[BaseProcess, Connection]) -> dict[str, Any]:
    """Each child's ready message, by process name. The first child to report an error, or to
    die without reporting (its pipe closes), fails start-up at once with its message or exit
    code: the one that failed is named, whichever child the others were waiting behind."""
    infos: dict[str, Any] = {}
    pending = {conn: child for child, conn in readers.items()}
    while pending:
        for conn in mp_wait(list(pending), timeout=READY_POLL_S):
            child = pending.pop(conn)  # type: ignore[arg-type]
            try:
                info = conn.recv()  # type: ignore[union-attr]
            except EOFError:
                child.join(2)  # reap it, so the exit code is known
                raise StartupError(
                    f"{child.name} process exited with code {child.exitcode} during start-up"
                ) from None
            if isinstance(info, dict) and info.get("status") != "ready":
                raise StartupError(f"{child.name} failed to start: {info.get('message')}")
            infos[child.name] = info
    return infos


class Engine:
    """The offline Python API: `Engine(model_path=...)`, then `generate()` / `async_generate()`.

    The TokenizerManager runs on a private event loop in a background thread, so `generate`
    works from plain synchronous code and `async_generate` from any other event loop.
    """

    def __init__(self, model_path: str | None = None, **kwargs: Any):
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="vla-engine-loop", daemon=True
        )
        self._thread.start()
        self.node = launch_node(ServerArgs(model_path=model_path, **kwargs))
        self.tokenizer_manager = self.node.tokenizer_manager
        self.node.start_watchdog(self._on_child_failure)
        self._closed = False

    def _on_child_failure(self, _: BaseProcess, reason: str) -> None:
        logger.error("%s; the engine is down", reason)
        self.tokenizer_manager.mark_dead_threadsafe(reason)

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _items(self, kwargs: dict[str, Any]) -> list[GenerateItem]:
        limits = self.tokenizer_manager.limits
        assert limits is not None
        return normalize(from_kwargs(**kwargs), limits)

    async def _collect(self, items: list[GenerateItem]) -> Any:
        return [
            out async for out in self.tokenizer_manager.generate_request(items, robot_defaults=True)
        ][-1]

    def generate(self, **kwargs: Any) -> Any:
        """Same fields as POST /generate; a dict (a list for a batch), or an iterator of
        chunks when `stream=True`."""
        items = self._items(kwargs)
        if items[0].stream:
            return self._iter_stream(items)
        return self._run(self._collect(items))

    def _stream_shaper(self) -> Any:
        """Chunks as POST /generate streams them (see frontend/stream_output.py)."""
        return stream_shaper(self.tokenizer_manager.config.incremental_streaming_output)

    def _iter_stream(self, items: list[GenerateItem]) -> Iterator[dict[str, Any]]:
        agen = self.tokenizer_manager.generate_request(items, robot_defaults=True)
        shape = self._stream_shaper()
        try:
            while True:
                try:
                    yield shape(self._run(agen.__anext__()))
                except StopAsyncIteration:
                    return
        finally:
            self._run(agen.aclose())

    async def async_generate(self, **kwargs: Any) -> Any:
        items = self._items(kwargs)
        if items[0].stream:
            return self._aiter_stream(items)
        return await asyncio.wrap_future(
            asyncio.run_coroutine_threadsafe(self._collect(items), self._loop)
        )

    async def _aiter_stream(self, items: list[GenerateItem]) -> AsyncIterator[dict[str, Any]]:
        agen = self.tokenizer_manager.generate_request(items, robot_defaults=True)
        shape = self._stream_shaper()

        def on_loop(coro: Any) -> Any:
            return asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

        try:
            while True:
                try:
                    yield shape(await on_loop(agen.__anext__()))
                except StopAsyncIteration:
                    return
        finally:
            await on_loop(agen.aclose())

    def flush_cache(self) -> Any:
        return self._run(self.tokenizer_manager.control.flush_cache())

    def update_weights_from_disk(self, model_path: str) -> Any:
        return self._run(self.tokenizer_manager.control.update_weights_from_disk(model_path))

    def get_server_info(self) -> dict[str, Any]:
        return self._run(self.tokenizer_manager.control.internal_state())

    def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._run(self._close_on_loop())
        self.node.shutdown()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    async def _close_on_loop(self) -> None:
        for t in self.tokenizer_manager._loop_tasks:
            t.cancel()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
