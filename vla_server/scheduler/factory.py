"""The real parts of a scheduler process, from its two configs: the checkpoint's policy family
(`policies.registry.detect`, the one classifier), the model runner on its parts, the tokenizer
(EOS, stop strings, BOS), the KV manager over the runner's pools, what an action request runs
(`head_spec`) and the image embedder, assembled into a SchedulerCore; and the readiness
handshake's `ModelInfo` for the other processes."""

from __future__ import annotations

import os
from concurrent.futures import Executor, ThreadPoolExecutor

import torch

from vla_server import cpu_placement
from vla_server.config import ModelRunnerConfig, SchedulerConfig
from vla_server.io_struct import ModelInfo
from vla_server.model.attention.registry import resolve_backend_name
from vla_server.model.model_runner import ModelRunner
from vla_server.policies.base import PolicyFamily
from vla_server.policies.registry import checkpoint_tokenizer, detect, import_plugins
from vla_server.scheduler.batch_runner import BatchRunner
from vla_server.scheduler.core import SchedulerCore
from vla_server.scheduler.finish_check import FinishChecker
from vla_server.scheduler.image_embedder import ImageEmbedder
from vla_server.scheduler.interfaces import OutputSink
from vla_server.scheduler.kv_cache_manager import KVCacheManager
from vla_server.scheduler.sessions import SessionController
from vla_server.scheduler.thread_plan import ThreadPlan


def build_model_runner(model: ModelRunnerConfig, family: PolicyFamily) -> ModelRunner:
    device = model.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return ModelRunner(
        family,
        device=device,
        dtype=None if model.dtype == "auto" else model.dtype,
        max_total_tokens=model.max_total_tokens,
        mem_fraction=model.mem_fraction_static,
        max_running_requests=model.max_running_requests,
        context_len=model.context_length,
        attention_backend=model.attention_backend,
    )


def background_lane(cfg: SchedulerConfig, device: torch.device) -> Executor | None:
    """The background lane's worker thread (priority isolation, see scheduler/isolation.py):
    with --realtime-priority, on a CPU with a core to spare (auto) or when asked for (on)."""
    if cfg.realtime_priority is None or cfg.realtime_background_lane == "off":
        return None
    spare = device.type == "cpu" and (os.cpu_count() or 1) >= 2
    if cfg.realtime_background_lane == "auto" and not spare:
        return None
    return ThreadPoolExecutor(
        max_workers=1, thread_name_prefix="model-background", initializer=_lowest_os_priority
    )


# On Linux a thread has its own nice value. The background lane's thread gets the lowest, so
# when the cores are busy the OS runs the main lane, the front end, the detokenizer and the
# robots' own programs first, and the lane gets what is left (`bench scheduler priority
# --workload text`: at nice 0 the protected robot's TTFT and ITL tails grew beside the lane).
BACKGROUND_NICE = 19


def _lowest_os_priority() -> None:
    cpu_placement.set_thread_nice(BACKGROUND_NICE)


def build_core(
    cfg: SchedulerConfig, model: ModelRunnerConfig, sink: OutputSink, worker: Executor
) -> tuple[SchedulerCore, ModelRunner]:
    import_plugins(model.checkpoint.policy_plugins)
    family = detect(model.checkpoint.model_path)
    runner = build_model_runner(model, family)
    tokenizer = checkpoint_tokenizer(family, model.checkpoint.tokenizer_path)
    kv = KVCacheManager(runner.req_to_token_pool, runner.kv_pool, cfg.disable_radix_cache)
    embedder = ImageEmbedder(runner, cfg.mm_embedding_cache_mb) if runner.vision else None
    core = SchedulerCore(
        cfg,
        kv,
        BatchRunner(
            runner,
            model.random_seed,
            embedder,
            frozenset(runner.config.eos_token_ids),
            ThreadPlan.of(model),
            parts_for=detect,
        ),
        sink,
        sessions=SessionController(kv.tree, cfg.max_session_held_tokens, tokenizer.bos_token_id),
        finish_checker=FinishChecker(tokenizer, set(runner.config.eos_token_ids)),
        context_len=runner.context_len,
        head=family.head_spec(tokenizer, runner.vocab_size),
        prefix_lm=runner.config.prefix_lm,
        model_counters=runner.work_done,
        embedder=embedder,
        worker=worker,
        background=background_lane(cfg, runner.device),
    )
    return core, runner


def place_threads(
    cfg: SchedulerConfig, core: SchedulerCore, worker: Executor, main_lane_threads: int
) -> tuple[int, ...] | None:
    """With the background lane, keep this process's threads but the main lane's worker off
    that worker's cores (`cpu_placement.py`); the cores the rest of the node keeps to, or None."""
    if core.background is None or cfg.realtime_cpu_split == "off":
        return None
    rest = cpu_placement.split(main_lane_threads)
    if rest is None:
        return None
    allowed = tuple(sorted(os.sched_getaffinity(0)))
    cpu_placement.keep_process_to(rest)  # the worker too, for a moment: it is freed next
    worker.submit(cpu_placement.free_main_lane_worker, allowed).result()
    return rest


def ready_info(
    runner: ModelRunner,
    kv_total_tokens: int,
    attention_backend: str,
    node_cpus: tuple[int, ...] | None = None,
) -> ModelInfo:
    """What the other processes learn in the readiness handshake."""
    cfg = runner.config
    family = runner.parts
    assert isinstance(family, PolicyFamily)
    return ModelInfo(
        family=family.name,
        model_path=str(runner.model_path),
        architecture=cfg.architecture,
        context_len=runner.context_len,
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.hidden_size,
        max_total_num_tokens=kv_total_tokens,
        device=str(runner.device),
        dtype=str(runner.dtype).removeprefix("torch."),
        attention_backend=resolve_backend_name(attention_backend, runner.device),
        image_token_id=cfg.image_token_id,
        num_image_tokens=runner.vision.num_image_tokens if runner.vision else 0,
        node_cpus=node_cpus,
    )
