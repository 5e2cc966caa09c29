"""ModelRunner against transformers' own implementation of the same tiny checkpoints.

A small driver plays the scheduler: it allocates request rows and KV slots, prefills ragged
batches, and decodes in batches. Every number is compared with the reference model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch
from transformers import AutoModelForCausalLM

from tests.support.hf_reference import assert_same_greedy
from tests.support.tiny_checkpoints import make_llama, make_qwen2
from vla_server.model.model_runner import LogitsOutput, ModelRunner
from vla_server.model.sampling import SamplingBatchInfo, SamplingParams, compute_logprobs
from vla_server.policies.registry import detect

LOGPROB_ATOL = 1e-3


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@dataclass
class Seq:
    row: int
    tokens: list[int] = field(default_factory=list)  # tokens whose K/V are in the pool


def new_seqs(runner: ModelRunner, n: int) -> list[Seq]:
    return [Seq(runner.req_to_token_pool.alloc()) for _ in range(n)]


def extend(
    runner: ModelRunner,
    seqs: list[Seq],
    new_tokens: list[list[int]],
    spans: list[tuple[int, int] | None] | None = None,
) -> LogitsOutput:
    slots = runner.kv_pool.allocator.alloc(sum(map(len, new_tokens)))
    prefix_lens = [len(s.tokens) for s in seqs]
    batch = runner.build_forward_batch([s.row for s in seqs], prefix_lens, new_tokens, slots)
    for seq, tokens in zip(seqs, new_tokens, strict=True):
        seq.tokens += tokens
    return runner.forward(batch, spans)


def release(runner: ModelRunner, seqs: list[Seq], shared_prefix: int = 0) -> None:
    for seq in seqs:
        table = runner.req_to_token_pool.req_to_token[seq.row]
        runner.kv_pool.allocator.free(table[shared_prefix : len(seq.tokens)].to(torch.int64))
        runner.req_to_token_pool.free(seq.row)


def hf_model(path) -> torch.nn.Module:
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def random_prompts(lengths: list[int], vocab: int, seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (n,), generator=g).tolist() for n in lengths]


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def pair(request):
    path = make_llama() if request.param == "llama" else make_qwen2()
    runner = ModelRunner(
        detect(path), max_total_tokens=4096, max_running_requests=16, progress=False
    )
    return runner, hf_model(path)


@torch.no_grad()
def hf_logits(hf, tokens: list[int]) -> torch.Tensor:
    """Reference logits [len(tokens), V] after each token."""
    return hf(torch.tensor([tokens])).logits[0].float()


@torch.no_grad()
def hf_generate(hf, prompt: list[int], steps: int) -> tuple[list[int], torch.Tensor]:
    out = hf.generate(
        torch.tensor([prompt]),
        # Explicit, or generate masks out prompt tokens that equal the pad id.
        attention_mask=torch.ones(1, len(prompt), dtype=torch.int64),
        max_new_tokens=steps,
        do_sample=False,
        eos_token_id=None,
        return_dict_in_generate=True,
        output_logits=True,
    )
    tokens = out.sequences[0, len(prompt) :].tolist()
    assert len(tokens) == steps, "reference stopped early"
    return tokens, torch.stack(out.logits)[:, 0].float()


def test_greedy_decode_matches_generate(pair):
    runner, hf = pair
    prompts = random_prompts([1, 3, 7, 12, 20, 33, 41, 56], runner.vocab_size, seed=7)
    steps = 64
    seqs = new_seqs(runner, len(prompts))
    greedy = SamplingParams(temperature=0.0)
    spans = [(0, len(p) - 1) if len(p) > 1 else None for p in prompts]
    out = extend(runner, seqs, prompts, spans)
    for prompt, span_logits in zip(prompts, out.prompt_logits, strict=True):
        check_prompt_logprobs(hf, prompt, span_logits)
    generated: list[list[int]] = [[] for _ in prompts]
    logprobs: list[list[tuple[float, list[tuple[float, int]]]]] = [[] for _ in prompts]
    for step in range(steps):
        info = SamplingBatchInfo.build([greedy] * len(prompts), runner.vocab_size, "cpu")
        sampled = runner.sample(out.next_token_logits, info, top_logprobs_nums=[3] * len(prompts))
        next_ids = sampled.next_token_ids.tolist()
        for i, token in enumerate(next_ids):
            generated[i].append(token)
            logprobs[i].append(
                (sampled.logprobs.token_logprobs[i], sampled.logprobs.top_logprobs[i])
            )
        if step < steps - 1:
            out = extend(runner, seqs, [[t] for t in next_ids])
    release(runner, seqs)
    for i, prompt in enumerate(prompts):
        ref_tokens, ref_logits = hf_generate(hf, prompt, steps)
        matched = assert_same_greedy(generated[i], ref_tokens, ref_logits, f"prompt {i}")
        ref_logprobs = torch.log_softmax(ref_logits, dim=-1)
        for step in range(matched):
            token_lp, top = logprobs[i][step]
            assert token_lp == pytest.approx(
                float(ref_logprobs[step, ref_tokens[step]]), abs=LOGPROB_ATOL
            )
            ref_top = ref_logprobs[step].topk(3)
            assert [t for _, t in top] == ref_top.indices.tolist()
            assert [v for v, _ in top] == pytest.approx(ref_top.values.tolist(), abs=LOGPROB_ATOL)


def check_prompt_logprobs(hf, prompt: list[int], span_logits: torch.Tensor | None) -> None:
    if len(prompt) < 2:
        assert span_logits is None
        return
    ref = torch.log_softmax(hf_logits(hf, prompt)[:-1], dim=-1)
    targets = torch.tensor(prompt[1:])
    ours = compute_logprobs(span_logits, targets).token_logprobs
    expected = ref.gather(1, targets[:, None]).squeeze(1).tolist()
    assert ours == pytest.approx(expected, abs=LOGPROB_ATOL)


def test_cached_prefix_and_mixed_batch(pair):
    runner, hf = pair
    long_prompt, fresh, decoding = random_prompts([40, 10, 6], runner.vocab_size, seed=11)
    seqs = new_seqs(runner, 3)
    # First chunk of the long prompt, and a request that will be decoding later.
    extend(runner, [seqs[0], seqs[2]], [long_prompt[:25], decoding])
    # One EXTEND batch: the rest of the long prompt on its cached prefix, a fresh prompt, and a
    # one-token decode step.
    out = extend(
        runner,
        seqs,
        [long_prompt[25:], fresh, [long_prompt[0]]],
        spans=[(0, 15), (3, 9), None],
    )
    ref_long = hf_logits(hf, long_prompt)
    ref_fresh = hf_logits(hf, fresh)
    ref_decode = hf_logits(hf, decoding + [long_prompt[0]])[-1]
    torch.testing.assert_close(out.prompt_logits[0], ref_long[25:40], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(out.prompt_logits[1], ref_fresh[3:9], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(out.next_token_logits[0], ref_long[-1], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(out.next_token_logits[1], ref_fresh[-1], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(out.next_token_logits[2], ref_decode, atol=1e-4, rtol=1e-4)
    release(runner, seqs)


def test_a_chunk_nobody_reads_writes_the_kv_the_next_chunk_needs(pair):
    """A prefill chunk that samples nothing skips its last layer's attention and MLP: it still
    writes every layer's K/V, so the next chunk's logits are transformers' over the whole
    prompt."""
    runner, hf = pair
    (prompt,) = random_prompts([40], runner.vocab_size, seed=11)
    (seq,) = new_seqs(runner, 1)
    slots = runner.kv_pool.allocator.alloc(25)
    batch = runner.build_forward_batch([seq.row], [0], [prompt[:25]], slots)
    seq.tokens += prompt[:25]
    first = runner.forward(batch, next_token_logits=False)
    assert first.next_token_logits.shape == (0, runner.vocab_size)
    rest = extend(runner, [seq], [prompt[25:]], [(0, 14)])
    reference = hf_logits(hf, prompt)
    torch.testing.assert_close(rest.next_token_logits[0], reference[-1], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(rest.prompt_logits[0], reference[25:39], atol=1e-4, rtol=1e-4)
    release(runner, [seq])


def test_shared_prefix_slots(pair):
    """Two requests whose rows point at the same cached prefix slots (what a radix cache does)."""
    runner, hf = pair
    prefix, tail_a, tail_b = random_prompts([18, 5, 9], runner.vocab_size, seed=3)
    owner, *sharers = new_seqs(runner, 3)
    extend(runner, [owner], [prefix])
    table = runner.req_to_token_pool.req_to_token
    for seq in sharers:
        table[seq.row, : len(prefix)] = table[owner.row, : len(prefix)]
        seq.tokens = list(prefix)
    out = extend(runner, sharers, [tail_a, tail_b])
    for i, tail in enumerate([tail_a, tail_b]):
        ref = hf_logits(hf, prefix + tail)[-1]
        torch.testing.assert_close(out.next_token_logits[i], ref, atol=1e-4, rtol=1e-4)
    release(runner, sharers, shared_prefix=len(prefix))
    release(runner, [owner])


def test_input_embeds_replace_token_embeddings(pair):
    runner, hf = pair
    (prompt,) = random_prompts([12], runner.vocab_size, seed=5)
    rows = hf.get_input_embeddings().weight.detach()[torch.tensor(prompt)].float()
    mask = torch.zeros(len(prompt), dtype=torch.bool)
    mask[2:7] = True
    # Masked positions carry a pad id far outside the vocabulary, as image tokens do.
    ids = [10**9 if m else t for t, m in zip(prompt, mask.tolist(), strict=True)]
    ref = hf_logits(hf, prompt)[-1]
    for embeds in (rows, rows[mask]):  # full-axis rows, or only the replacing rows
        seqs = new_seqs(runner, 1)
        slots = runner.kv_pool.allocator.alloc(len(prompt))
        batch = runner.build_forward_batch(
            [seqs[0].row], [0], [ids], slots, input_embeds=embeds, input_embeds_mask=mask
        )
        seqs[0].tokens = list(prompt)
        out = runner.forward(batch)
        torch.testing.assert_close(out.next_token_logits[0], ref, atol=1e-4, rtol=1e-4)
        release(runner, seqs)


def test_seeded_sampling_independent_of_batch(pair):
    runner, _ = pair
    target, other_a, other_b = random_prompts([9, 4, 15], runner.vocab_size, seed=21)
    seeded = SamplingParams(temperature=1.0, top_p=0.95, seed=1234)

    def run(prompts: list[list[int]], params: list[SamplingParams]) -> list[int]:
        seqs = new_seqs(runner, len(prompts))
        out = extend(runner, seqs, prompts)
        info = SamplingBatchInfo.build(params, runner.vocab_size, "cpu")
        tokens = []
        for _ in range(12):
            next_ids = runner.sample(out.next_token_logits, info).next_token_ids.tolist()
            tokens.append(next_ids[0])
            out = extend(runner, seqs, [[t] for t in next_ids])
            info = SamplingBatchInfo.build(
                params, runner.vocab_size, "cpu", generators=info.generators
            )
        release(runner, seqs)
        return tokens

    alone = run([target], [seeded])
    crowd = run(
        [target, other_a, other_b],
        [seeded, SamplingParams(temperature=0.8, seed=99), SamplingParams(temperature=1.2)],
    )
    assert alone == crowd
    assert run([target], [SamplingParams(temperature=1.0, top_p=0.95, seed=1235)]) != alone


@pytest.mark.parametrize(
    "rope_scaling",
    [
        {"rope_type": "dynamic", "factor": 2.0},
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
        {"rope_type": "linear", "factor": 2.0},
    ],
    ids=["dynamic", "yarn", "linear"],
)
def test_rope_scaling_generation_beyond_original_length(rope_scaling):
    """Greedy decoding across max_position_embeddings, where scaled RoPE matters."""
    path = make_llama(max_position_embeddings=32, rope_scaling=rope_scaling)
    runner = ModelRunner(
        detect(path), max_total_tokens=512, max_running_requests=2, context_len=96, progress=False
    )
    hf = hf_model(path)
    prompts = random_prompts([40, 9], runner.vocab_size, seed=13)
    steps = 30  # the short prompt crosses position 32 while decoding
    seqs = new_seqs(runner, len(prompts))
    out = extend(runner, seqs, prompts)
    generated: list[list[int]] = [[] for _ in prompts]
    for step in range(steps):
        next_ids = out.next_token_logits.argmax(dim=-1).tolist()
        for i, token in enumerate(next_ids):
            generated[i].append(token)
        if step < steps - 1:
            out = extend(runner, seqs, [[t] for t in next_ids])
    for i, prompt in enumerate(prompts):
        ref_tokens, ref_logits = hf_generate(hf, prompt, steps)
        assert_same_greedy(generated[i], ref_tokens, ref_logits, f"prompt {i}")
