"""Greedy outputs of the node on the demo VLA are token-for-token identical with
`--attention-backend torch` and `--attention-backend triton` (the Triton kernels, run through the
interpreter on CPU).

The torch backend is the reference (it is checked against transformers elsewhere). The prompts
have different lengths and arrive staggered, so prefill batches are ragged and decode batches mix
sequence lengths; the longer ones span more than one 64-token key block of the decode and extend
kernels, and one crosses that boundary while decoding.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.support.server import run_server

pytest.importorskip("triton")

NEW_TOKENS = 16
KV_BLOCK = 64  # BLOCK_N of the decode and extend kernels' launchers
STAGGER_S = 1.0  # about one interpreted decode step of the demo model
PROMPTS = [
    "pick",
    "Pick up the red block and place it in the drawer.",
    # About 50 tokens: its decode crosses the 64-token block boundary.
    "Move the arm to the left of the blue cup, then open the gripper slowly, lift the sponge, "
    "and stack it on the green bowl near the camera.",
    # More than two key blocks of prompt.
    " ".join(
        ["Slide the carrot towards the spoon, then grasp the drawer handle and pull it open."] * 5
    ),
]


async def _generate_all(server: object) -> list[dict]:
    async with server.async_client(timeout=600) as client:  # type: ignore[attr-defined]

        async def one(i: int, text: str) -> dict:
            await asyncio.sleep(i * STAGGER_S)
            r = await client.post("/generate", json={
                "text": text,
                "sampling_params": {
                    "max_new_tokens": NEW_TOKENS, "temperature": 0, "ignore_eos": True,
                },
            })  # fmt: skip
            assert r.status_code == 200, r.text
            return r.json()

        return await asyncio.gather(*(one(i, p) for i, p in enumerate(PROMPTS)))


def _serve_and_generate(backend: str, tmp_path: object, env: dict[str, str]) -> list[dict]:
    args = ("--attention-backend", backend, "--device", "cpu", "--dtype", "float32")
    limits = ("--max-total-tokens", "2048", "--max-running-requests", "8")
    with run_server(None, tmp_path, *args, *limits, env=env) as server:
        info = server.client().get("/get_server_info").json()
        assert info["attention_backend"] == backend
        return asyncio.run(_generate_all(server))


def test_greedy_outputs_equal_across_attention_backends(tmp_path):
    # The two nodes are independent: run them side by side to halve the wall time.
    with ThreadPoolExecutor(2) as pool:
        ref_job = pool.submit(_serve_and_generate, "torch", tmp_path, {})
        triton_job = pool.submit(_serve_and_generate, "triton", tmp_path, {"TRITON_INTERPRET": "1"})
        reference, triton = ref_job.result(), triton_job.result()

    prompt_lens = [o["meta_info"]["prompt_tokens"] for o in reference]
    assert len(set(prompt_lens)) == len(PROMPTS), prompt_lens
    assert max(prompt_lens) > 2 * KV_BLOCK
    assert any(n < KV_BLOCK < n + NEW_TOKENS for n in prompt_lens), prompt_lens
    for ref, got in zip(reference, triton, strict=True):
        assert len(ref["output_ids"]) == NEW_TOKENS
        assert got["meta_info"]["prompt_tokens"] == ref["meta_info"]["prompt_tokens"]
        assert got["output_ids"] == ref["output_ids"]
    # Identical outputs mean nothing if the model ignores its input.
    assert len({tuple(o["output_ids"]) for o in reference}) == len(PROMPTS)
