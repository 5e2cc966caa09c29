"""Torch threads per step: a lone long step, or one nothing streams from, may use every core;
anything else keeps the few threads that leave cores to the front end and the detokenizer."""

from __future__ import annotations

import os
import threading
from types import SimpleNamespace

import torch

from vla_server.config import ServerArgs
from vla_server.scheduler.batch_runner import BatchRunner
from vla_server.scheduler.thread_plan import ThreadPlan


def test_a_lone_long_step_or_one_that_streams_nothing_gets_the_prefill_threads():
    plan = ThreadPlan(decode=1, prefill=4, min_tokens=64)
    assert plan.threads_for(1, 64) == 4
    assert plan.threads_for(1, 63) == 1  # a decode step or a short turn
    assert plan.threads_for(2, 500) == 1  # another robot is in flight: its front end is busy
    # Nothing streams from the step (denoising prompts and passes): the front end waits, and
    # every core is worth it once the matmuls are big enough to split.
    assert plan.threads_for(8, 50, streams=False, width=512) == 4
    assert plan.threads_for(1, 50, streams=False, width=512) == 4
    assert plan.threads_for(8, 32, streams=False, width=64) == 1  # a tiny model's passes
    assert plan.threads_for(8, 50, streams=False) == 1  # width unknown


def test_the_plan_follows_the_flags_with_all_cores_for_prefill_by_default(tmp_path):
    def plan(*flags: int | None) -> ThreadPlan:
        config = ServerArgs(
            model_path=str(tmp_path), torch_num_threads=flags[0], prefill_torch_threads=flags[1]
        )
        return ThreadPlan.of(config.configs().model)

    assert (plan(1, None).decode, plan(1, None).prefill) == (1, os.cpu_count())
    assert (plan(2, 3).decode, plan(2, 3).prefill) == (2, 3)


def test_the_runner_switches_its_thread_count_only_when_the_plan_changes(monkeypatch):
    calls: list[int] = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    runner = _runner(ThreadPlan(decode=1, prefill=2))
    for requests, tokens in [(1, 300), (1, 1), (1, 1), (3, 300), (1, 80), (1, 90)]:
        runner._set_threads(requests, tokens)
    assert calls == [2, 1, 2]


def test_while_the_background_lane_runs_every_step_keeps_the_decode_threads(monkeypatch):
    calls: list[int] = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    runner = _runner(ThreadPlan(decode=1, prefill=2))
    runner._background_runs = 1  # a background batch is running on its own thread
    runner._set_threads(1, 300)  # a lone long prefill of the main lane
    assert calls == [1]
    runner._background_runs = 0
    runner._set_threads(1, 300)
    assert calls == [1, 2]

    lane = _runner(ThreadPlan(decode=1, prefill=2))
    lane._thread.background = True  # the background lane's own thread
    lane._set_threads(1, 300)
    assert calls == [1, 2, 1]


def _runner(plan: ThreadPlan) -> BatchRunner:
    runner = BatchRunner.__new__(BatchRunner)
    runner.threads, runner._thread, runner._background_runs = plan, threading.local(), 0
    runner.runner = SimpleNamespace(config=SimpleNamespace(hidden_size=512))
    return runner
