"""Scheduler behaviours through a live node, against transformers: a request ends on the
checkpoint's EOS, one that can never fit the KV pool is refused with a 4xx naming the limit, and
prompt logprobs start at logprob_start_len. (Aborting waiting and running requests is a unit
test on the scheduling core: tests/unit/scheduler/test_sched_core.py.)

The node serves a copy of the tiny Llama whose EOS is a token that greedy decoding of PROMPT
produces (found with transformers first), with a 300-token KV pool and one running request.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.support.async_node import meta
from tests.support.hf_reference import causal_lm, greedy_ids
from tests.support.server import idle_state, run_server
from tests.support.tiny_checkpoints import SPECIAL_TOKENS

PROMPT = [85, 289, 430, 391, 422, 408]
KV_POOL = 300
REF_TOKENS = 40
LOGPROB_TOL = 1e-3
SPECIAL_TOKEN_IDS = range(len(SPECIAL_TOKENS))  # the tokenizer's specials come first


def _with_eos(src: Path, dst: Path, eos: int) -> Path:
    shutil.copytree(src, dst)
    for name in ("config.json", "generation_config.json"):
        cfg = json.loads((dst / name).read_text())
        cfg["eos_token_id"] = eos
        (dst / name).write_text(json.dumps(cfg))
    return dst


@pytest.fixture(scope="module")
def hf_llama(llama_path):
    return causal_lm(llama_path)  # the unmodified checkpoint: no EOS at all


@pytest.fixture(scope="module")
def eos_case(llama_path, hf_llama, tmp_path_factory) -> dict[str, Any]:
    """A checkpoint whose EOS is the first new token of greedy PROMPT at index >= 5 (not a
    special token), and what transformers generates on it with and without that EOS."""
    free = greedy_ids(hf_llama, PROMPT, REF_TOKENS)
    k = next(i for i in range(5, len(free)) if free[i] not in free[:i] + list(SPECIAL_TOKEN_IDS))
    path = _with_eos(llama_path, tmp_path_factory.mktemp("eos") / "llama-eos", free[k])
    stopped = greedy_ids(causal_lm(path, stop_at_eos=True), PROMPT, REF_TOKENS)
    assert stopped == free[: k + 1], "transformers should stop at the new EOS"
    return {"path": path, "eos": free[k], "free": free, "stopped": stopped}


@pytest.fixture(scope="module")
def node(eos_case, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("node")
    with run_server(
        eos_case["path"],
        tmp,
        "--max-total-tokens",
        str(KV_POOL),
        "--max-running-requests",
        "1",
    ) as s:
        yield s


def _sse(text: str) -> list[dict]:
    return [json.loads(e[6:]) for e in text.split("\n\n") if e.startswith("data: {")]


def _greedy(n: int, *, ignore_eos: bool = False, **extra: Any) -> dict[str, Any]:
    """A greedy request for PROMPT (by default one that stops at the EOS)."""
    sampling = {"max_new_tokens": n, "temperature": 0, "ignore_eos": ignore_eos}
    return {"input_ids": PROMPT, "sampling_params": sampling, **extra}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_the_checkpoint_eos_ends_the_request(node, eos_case, stream):
    with node.client() as c:
        r = c.post("/generate", json=_greedy(REF_TOKENS, stream=stream))
        assert r.status_code == 200, r.text
        if stream:
            chunks = _sse(r.text)
            ids = chunks[-1]["output_ids"]
            info = chunks[-1]["meta_info"]
        else:
            ids, info = r.json()["output_ids"], r.json()["meta_info"]
        assert ids == eos_case["stopped"]
        assert info["finish_reason"] == {"type": "stop", "matched": eos_case["eos"]}
        assert info["completion_tokens"] == len(eos_case["stopped"]) < REF_TOKENS
        # the same request with ignore_eos runs past it, as transformers without an EOS
        past = c.post("/generate", json=_greedy(REF_TOKENS, ignore_eos=True)).json()
        assert past["output_ids"] == eos_case["free"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_request_that_can_never_fit_the_kv_pool_is_a_4xx_naming_the_limit(node, stream):
    too_many = KV_POOL - len(PROMPT) + 1
    with node.client() as c:
        before = idle_state(c)
        r = c.post("/generate", json=_greedy(too_many, stream=stream))
        assert r.status_code == 400, r.text
        message = r.json()["error"]["message"]
        assert "--max-total-tokens" in message, message
        assert f"needs {KV_POOL + 1} KV tokens" in message and f"holds {KV_POOL}" in message
        assert idle_state(c) == before
        # one token fewer fills the pool exactly: that request is accepted and runs to its end
        r = c.post("/generate", json=_greedy(too_many - 1, ignore_eos=True, stream=stream))
        assert r.status_code == 200, r.text
        last = _sse(r.text)[-1] if stream else r.json()
        assert last["meta_info"]["finish_reason"] == {"type": "length", "length": too_many - 1}


def _hf_prompt_logprobs(model: Any, ids: list[int]) -> torch.Tensor:
    """[len(ids) - 1, V]: row i - 1 is the distribution that scores prompt token i."""
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0]
    return torch.log_softmax(logits.float(), -1)[:-1]


@pytest.mark.parametrize("start", [1, 4, 9])
def test_prompt_logprobs_from_logprob_start_len(node, hf_llama, start):
    prompt = [85, 289, 430, 391, 422, 408, 390, 402, 451, 389, 420, 398]
    ref = _hf_prompt_logprobs(hf_llama, prompt)
    body = {
        **_greedy(2),
        "input_ids": prompt,
        "return_logprob": True,
        "logprob_start_len": start,
        "top_logprobs_num": 2,
    }
    with node.client() as c:
        # the second time the prompt's prefix is in the radix cache: the same logprobs
        outs = [c.post("/generate", json=body).json() for _ in range(2)]
    if start > 1:
        # cached positions have no logits, so the cache may serve only the unscored prefix
        assert 0 < meta(outs[1])["cached_tokens"] <= start - 1
    for out in outs:
        got, top = meta(out)["input_token_logprobs"], meta(out)["input_top_logprobs"]
        assert [t for _, t, _ in got] == prompt[start:]
        assert len(top) == len(got)
        for (lp, tid, _), top2, i in zip(got, top, range(start, len(prompt)), strict=True):
            row = ref[i - 1]
            assert abs(lp - float(row[tid])) < LOGPROB_TOL, f"prompt token {i}"
            # top-2 by value, rank by rank, and each value is its id's (ties may swap ids)
            want = torch.topk(row, 2).values.tolist()
            assert len({t for _, t, _ in top2}) == 2, top2
            for (v, t, _), w in zip(top2, want, strict=True):
                assert abs(v - w) < LOGPROB_TOL and abs(v - float(row[t])) < LOGPROB_TOL, i
