"""The real parts of a scheduler process, from its two configs: the model runner, the tokenizer
(EOS, stop strings, BOS), the KV manager over the runner's pools, the action-token mask and the
image embedder, assembled into a SchedulerCore; and the readiness info for the main process."""

from __future__ import annotations

import dataclasses
from concurrent.futures import Executor
from typing import Any

import torch

from vla_server.config import ModelRunnerConfig, SchedulerConfig, ThreadPlan
from vla_server.model.attention.registry import resolve_backend_name
from vla_server.model.model_runner import ModelRunner
from vla_server.model.tokenizer import load_tokenizer
from vla_server.policies.bin_actions.action_tokenizer import load_action_tokenizer
from vla_server.policies.pi0.flow_actions import FlowActionPolicy
from vla_server.scheduler.batch_runner import BatchRunner
from vla_server.scheduler.core import SchedulerCore
from vla_server.scheduler.denoise_state import FlowSpec
from vla_server.scheduler.finish_check import FinishChecker
from vla_server.scheduler.image_embedder import ImageEmbedder
from vla_server.scheduler.interfaces import OutputSink
from vla_server.scheduler.kv_cache_manager import KVCacheManager
from vla_server.scheduler.sessions import SessionController


def build_model_runner(model: ModelRunnerConfig) -> ModelRunner:
    device = model.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return ModelRunner(
        model.checkpoint.model_path,
        device=device,
        dtype=None if model.dtype == "auto" else model.dtype,
        max_total_tokens=model.max_total_tokens,
        mem_fraction=model.mem_fraction_static,
        max_running_requests=model.max_running_requests,
        context_len=model.context_length,
        attention_backend=model.attention_backend,
    )


def action_mask(model_path: str, tokenizer: Any, vocab_size: int) -> torch.Tensor | None:
    """Allowed tokens of action requests (the action bins, or FAST's tokens and their ends), or
    None without action tokens (none at all, or a flow-matching policy's denoised chunk)."""
    actions = load_action_tokenizer(model_path, tokenizer)
    if actions is None or isinstance(actions, FlowActionPolicy):
        return None
    return actions.allowed_mask(vocab_size)


def flow_spec(runner: ModelRunner) -> FlowSpec | None:
    """The denoising of a pi0 / pi0.5 checkpoint's action requests (None for other models)."""
    spec = runner.policy_spec
    if runner.flow is None or spec is None:
        return None
    return FlowSpec(spec.chunk_size, spec.max_action_dim, spec.num_inference_steps)


def build_core(
    cfg: SchedulerConfig, model: ModelRunnerConfig, sink: OutputSink, worker: Executor
) -> tuple[SchedulerCore, ModelRunner]:
    runner = build_model_runner(model)
    tokenizer = load_tokenizer(model.checkpoint.tokenizer_path)
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
        ),
        sink,
        sessions=SessionController(kv.tree, cfg.max_session_held_tokens, tokenizer.bos_token_id),
        finish_checker=FinishChecker(tokenizer, set(runner.config.eos_token_ids)),
        context_len=runner.context_len,
        action_mask=action_mask(model.checkpoint.model_path, tokenizer, runner.vocab_size),
        prefix_lm=runner.config.prefix_lm,
        flow=flow_spec(runner),
        model_counters=lambda: dataclasses.asdict(runner.flow_counters),
        embedder=embedder,
        worker=worker,
    )
    return core, runner


def ready_info(runner: ModelRunner, kv_total_tokens: int, attention_backend: str) -> dict[str, Any]:
    """What the main process learns in the readiness handshake."""
    cfg = runner.config
    return {
        "status": "ready",
        "max_total_num_tokens": kv_total_tokens,
        "context_len": runner.context_len,
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "architectures": [cfg.architecture],
        "device": str(runner.device),
        "dtype": str(runner.dtype).removeprefix("torch."),
        "image_token_id": cfg.image_token_id,
        "vision_format": cfg.vision_format,
        "prefix_lm": cfg.prefix_lm,
        "num_image_tokens": runner.vision.num_image_tokens if runner.vision else 0,
        "attention_backend": resolve_backend_name(attention_backend, runner.device),
    }
