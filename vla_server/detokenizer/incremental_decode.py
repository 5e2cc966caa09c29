"""Incremental batch detokenisation with surrounding/read offsets.

Per request we keep the ids decoded so far and two offsets: `surr` (start of a few tokens of
left context) and `read` (end of what has been committed). Each step decodes `ids[surr:read]`
and `ids[surr:]` for the whole batch in two tokenizer calls; the new text is the difference.
Text that ends in U+FFFD (an incomplete UTF-8 sequence split across tokens) is held back until
the next token completes it, so a client never sees a broken character. Text that could still
grow into a stop string is held back too, and at the finish the matched stop string (or the
text of the matched stop token) is trimmed unless the request asked for `no_stop_trim`, as in
SGLang. The output ids always keep the stop token.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Protocol

from vla_server.io_struct import FinishReason, FinishStop

REPLACEMENT_CHAR = "\ufffd"
MAX_STATES = 65536


class BatchDecoder(Protocol):
    def batch_decode(
        self, sequences: list[list[int]], skip_special_tokens: bool, **kwargs: Any
    ) -> list[str]: ...


@dataclass
class DecodeState:
    ids: list[int]
    surr: int
    read: int
    skip_special_tokens: bool
    stop_strs: list[str]
    no_stop_trim: bool = False
    spaces_between_special_tokens: bool = True
    text: str = ""  # committed text of the output (context excluded)
    sent: int = 0  # chars of `text` already emitted
    pending: list[int] = field(default_factory=list)


@dataclass
class DecodeInput:
    rid: str
    new_ids: list[int]
    context_len: int  # on the first message: how many leading ids are prompt context
    skip_special_tokens: bool
    stop_strs: list[str]
    finished_reason: FinishReason | None
    no_stop_trim: bool = False
    spaces_between_special_tokens: bool = True


class IncrementalDecoder:
    def __init__(self, tokenizer: BatchDecoder, vocab_size: int):
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.states: OrderedDict[str, DecodeState] = OrderedDict()

    def _state(self, item: DecodeInput) -> DecodeState:
        st = self.states.get(item.rid)
        if st is None:
            ctx = item.context_len
            st = DecodeState(
                [],
                0,
                ctx,
                item.skip_special_tokens,
                item.stop_strs,
                item.no_stop_trim,
                item.spaces_between_special_tokens,
            )
            self.states[item.rid] = st
            while len(self.states) > MAX_STATES:
                self.states.popitem(last=False)
        return st

    def step(self, items: list[DecodeInput]) -> list[str]:
        """Consume new ids for each request; return the text to emit for each, in order."""
        states = [self._state(it) for it in items]
        for st, it in zip(states, items, strict=True):
            # Ids beyond the vocabulary (image pads) cannot be decoded; they never start a output.
            st.ids.extend(i if 0 <= i < self.vocab_size else 0 for i in it.new_ids)
            if _trims_stop_token(st, it.finished_reason):
                st.ids.pop()
        surr_texts = self._decode(states, lambda s: s.ids[s.surr : s.read])
        read_texts = self._decode(states, lambda s: s.ids[s.surr :])
        out = []
        for st, it, surr_text, read_text in zip(states, items, surr_texts, read_texts, strict=True):
            new_text = read_text[len(surr_text) :]
            finished = it.finished_reason is not None
            if finished or not new_text.endswith(REPLACEMENT_CHAR):
                st.text += new_text
                st.surr, st.read = st.read, len(st.ids)
            out.append(self._emit(st, it.finished_reason))
            if finished:
                self.states.pop(it.rid, None)
        return out

    def _decode(self, states: list[DecodeState], window: Any) -> list[str]:
        result = [""] * len(states)
        for flags in {(s.skip_special_tokens, s.spaces_between_special_tokens) for s in states}:
            rows = [
                i
                for i, s in enumerate(states)
                if (s.skip_special_tokens, s.spaces_between_special_tokens) == flags
            ]
            seqs = [window(states[i]) for i in rows]
            nonempty = [(i, q) for i, q in zip(rows, seqs, strict=True) if q]
            if nonempty:
                # transformers' default is True; passed only when off (slow tokenizers use it).
                extra = {} if flags[1] else {"spaces_between_special_tokens": False}
                texts = self.tokenizer.batch_decode(
                    [q for _, q in nonempty], skip_special_tokens=flags[0], **extra
                )
                for (i, _), t in zip(nonempty, texts, strict=True):
                    result[i] = t
        return result

    def _emit(self, st: DecodeState, finished_reason: FinishReason | None) -> str:
        if finished_reason is not None:
            end = len(st.text) if st.no_stop_trim else _trim_stop(st.text, finished_reason)
        else:
            end = len(st.text) - _held_stop_prefix(st.text, st.stop_strs)
        end = max(end, st.sent)
        chunk = st.text[st.sent : end]
        st.sent = end
        return chunk


def _trims_stop_token(st: DecodeState, finished_reason: FinishReason | None) -> bool:
    """The request ended on a stop token id (or EOS) that arrived in this message, and its
    text is to be left out."""
    return (
        isinstance(finished_reason, FinishStop)
        and isinstance(finished_reason.matched, int)
        and not st.no_stop_trim
        and len(st.ids) > st.read
        and st.ids[-1] == finished_reason.matched
    )


def _trim_stop(text: str, finished_reason: FinishReason) -> int:
    if isinstance(finished_reason, FinishStop) and isinstance(finished_reason.matched, str):
        matched = finished_reason.matched
        pos = text.find(matched) if matched else -1
        if pos >= 0:
            return pos
    return len(text)


def _held_stop_prefix(text: str, stop_strs: list[str]) -> int:
    """Characters at the end of `text` that may belong to a stop string: from a complete match
    (the finish is on its way) or the longest tail that is a proper prefix of one."""
    held = 0
    for s in stop_strs:
        pos = text.find(s)
        if pos >= 0:
            held = max(held, len(text) - pos)
            continue
        for k in range(min(len(s) - 1, len(text)), held, -1):
            if text.endswith(s[:k]):
                held = k
                break
    return held
