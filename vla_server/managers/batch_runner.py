"""One forward + sample over a list of requests: KV slots, ForwardBatch, logits, logprobs."""

from __future__ import annotations

import torch

from vla_server.io_struct import MMItem
from vla_server.managers.image_embedder import ImageEmbedder
from vla_server.managers.req import Req
from vla_server.managers.req_kv import ReqKVManager
from vla_server.model.model_runner import ModelRunner
from vla_server.model.sampling import SamplingBatchInfo, compute_logprobs, make_generator


class BatchRunner:
    def __init__(
        self,
        runner: ModelRunner,
        kv: ReqKVManager,
        seed: int,
        embedder: ImageEmbedder | None = None,
    ):
        self.runner = runner
        self.kv = kv
        self.device = runner.device
        self.embedder = embedder
        torch.manual_seed(seed)

    def generator_for(self, seed: int | None) -> torch.Generator | None:
        return None if seed is None else make_generator(seed, self.device)

    def run(self, reqs: list[Req], is_decode: bool) -> list[int]:
        """Forward the new tokens of `reqs`, sample one token each; advances `kv_len`."""
        if is_decode:
            tokens = [[r.output_ids[-1]] for r in reqs]
        else:
            tokens = [r.fill_ids[r.kv_len :] for r in reqs]
            if not self.kv.alloc_rows(reqs):
                raise RuntimeError("no free request rows; admission should have prevented this")
        slots = self.kv.alloc_tokens(sum(len(t) for t in tokens))
        embeds, mask = (None, None) if is_decode else self._embeds(reqs, tokens)
        batch = self.runner.build_forward_batch(
            [r.req_pool_idx for r in reqs],
            [r.kv_len for r in reqs],
            tokens,
            slots,
            input_embeds=embeds,
            input_embeds_mask=mask,
        )
        spans = (
            None
            if is_decode
            else [_prompt_span(r, len(t)) for r, t in zip(reqs, tokens, strict=True)]
        )
        logits = self.runner.forward(batch, spans)
        info = SamplingBatchInfo.build(
            [r.sampling_params for r in reqs],
            self.runner.vocab_size,
            self.device,
            generators=[r.generator for r in reqs],
            masks=[r.vocab_mask for r in reqs],
        )
        want = [r.top_logprobs_num if r.return_logprob else 0 for r in reqs]
        out = self.runner.sample(
            logits.next_token_logits,
            info,
            top_logprobs_nums=want if any(r.return_logprob for r in reqs) else None,
        )
        next_ids = out.next_token_ids.tolist()
        for i, r in enumerate(reqs):
            if spans is not None and spans[i] is not None:
                self._prompt_logprobs(r, spans[i], logits.prompt_logits[i])
            elif r.return_logprob and r.kv_len == 0 and r.logprob_start_len == 0:
                self._first_prompt_token(r)
            r.kv_len += len(tokens[i])
            if r.return_logprob and out.logprobs is not None and r.max_new_tokens > 0:
                d = r.logprobs_delta()
                d.output_vals.append(out.logprobs.token_logprobs[i])
                d.output_top.append(out.logprobs.top_logprobs[i])
        return next_ids

    def _embeds(
        self, reqs: list[Req], tokens: list[list[int]]
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """Rows that replace the token embedding: caller embeddings and image features."""
        spans = [(r, r.kv_len, r.kv_len + len(t)) for r, t in zip(reqs, tokens, strict=True)]
        images = [it for r, lo, hi in spans for it in r.mm_items if _overlap(it, lo, hi)]
        if not images and all(r.input_embeds is None for r in reqs):
            return None, None
        assert self.embedder is not None or not images
        features = self.embedder.lookup(images) if images else {}
        n = sum(len(t) for t in tokens)
        embeds = torch.zeros((n, self.runner.config.hidden_size), dtype=self.runner.dtype)
        mask = torch.zeros(n, dtype=torch.bool)
        off = 0
        for r, lo, hi in spans:
            if r.input_embeds is not None:
                embeds[off : off + hi - lo] = r.input_embeds[lo:hi]
                mask[off : off + hi - lo] = True
            for it in r.mm_items:
                a, b = max(lo, it.offset), min(hi, it.offset + it.length)
                if a < b:
                    embeds[off + a - lo : off + b - lo] = features[it.hash][
                        a - it.offset : b - it.offset
                    ]
                    mask[off + a - lo : off + b - lo] = True
            off += hi - lo
        return embeds, mask

    def _first_prompt_token(self, r: Req) -> None:
        d = r.logprobs_delta()
        d.input_vals.append(None)
        d.input_ids.append(r.origin_input_ids[0])
        d.input_top.append([])

    def _prompt_logprobs(self, r: Req, span: tuple[int, int], logits: torch.Tensor | None) -> None:
        assert logits is not None
        if r.kv_len == 0 and r.logprob_start_len == 0:
            self._first_prompt_token(r)
        lo, hi = r.kv_len + span[0], r.kv_len + span[1]
        targets = r.origin_input_ids[lo + 1 : hi + 1]
        lp = compute_logprobs(
            logits, torch.tensor(targets, device=logits.device), r.top_logprobs_num
        )
        d = r.logprobs_delta()
        d.input_vals.extend(lp.token_logprobs)
        d.input_ids.extend(targets)
        d.input_top.extend(lp.top_logprobs)


def _overlap(item: MMItem, lo: int, hi: int) -> bool:
    return item.offset < hi and lo < item.offset + item.length


def _prompt_span(r: Req, n_new: int) -> tuple[int, int] | None:
    """Offsets into this forward's new tokens whose logits score prompt tokens of `r`.

    Prompt token i (i >= 1) is scored by the logits at position i - 1; the caller asked for
    tokens from `logprob_start_len` on.
    """
    if not r.return_logprob or r.logprob_start_len < 0:
        return None
    prompt_len = len(r.origin_input_ids)
    lo = max(max(r.logprob_start_len, 1) - 1, r.kv_len)
    hi = min(prompt_len - 1, r.kv_len + n_new)
    if lo >= hi:
        return None
    return lo - r.kv_len, hi - r.kv_len
