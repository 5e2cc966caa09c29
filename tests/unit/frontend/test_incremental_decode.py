"""Incremental detokenisation: no broken UTF-8 characters; stop strings held back and trimmed."""

from __future__ import annotations

import pytest

from tests.support.tiny_checkpoints import make_tokenizer
from vla_server.detokenizer.incremental_decode import DecodeInput, IncrementalDecoder
from vla_server.io_struct import FinishStop

TEXTS = [
    "pick up the cube",
    "café déjà vu — naïve",
    "日本語のロボット 🤖 arm 🦾!",
    "mixed: ä😀b€c𝄞d",
]


@pytest.fixture(scope="module")
def tok():
    return make_tokenizer()


def _feed(
    dec: IncrementalDecoder,
    ids: list[int],
    rid: str = "r",
    stops: list[str] | None = None,
    finish: dict | None = None,
    context: list[int] | None = None,
) -> list[str]:
    ctx = context or []
    out = []
    for i, t in enumerate(ids):
        last = i == len(ids) - 1
        new = ctx + [t] if i == 0 else [t]
        item = DecodeInput(
            rid,
            new,
            len(ctx) if i == 0 else 0,
            True,
            stops or [],
            (finish or {"type": "length"}) if last else None,
        )
        out += dec.step([item])
    return out


@pytest.mark.parametrize("text", TEXTS)
def test_token_by_token_equals_full_decode_without_broken_chars(tok, text):
    ids = tok(text)["input_ids"]
    dec = IncrementalDecoder(tok, len(tok))
    chunks = _feed(dec, ids)
    assert "".join(chunks) == tok.decode(ids)
    assert not any("\ufffd" in c for c in chunks)
    assert dec.states == {}  # state dropped at the finish


def test_batch_of_requests_decodes_each_independently(tok):
    dec = IncrementalDecoder(tok, len(tok))
    seqs = {f"r{i}": tok(t)["input_ids"] for i, t in enumerate(TEXTS)}
    out = dict.fromkeys(seqs, "")
    for step in range(max(len(s) for s in seqs.values())):
        items = [
            DecodeInput(
                rid, [ids[step]], 0, True, [], {"type": "length"} if step == len(ids) - 1 else None
            )
            for rid, ids in seqs.items()
            if step < len(ids)
        ]
        for item, chunk in zip(items, dec.step(items), strict=True):
            out[item.rid] += chunk
    assert out == {rid: tok.decode(ids) for rid, ids in seqs.items()}


def test_left_context_is_not_emitted(tok):
    prompt = tok("the robot says")["input_ids"]
    ids = tok(" hello there")["input_ids"]
    dec = IncrementalDecoder(tok, len(tok))
    full = tok.decode(prompt[-3:] + ids)
    assert "".join(_feed(dec, ids, context=prompt[-3:])) == full[len(tok.decode(prompt[-3:])) :]


def test_stop_string_is_held_back_then_trimmed(tok):
    ids = tok("move left STOP and more")["input_ids"]
    dec = IncrementalDecoder(tok, len(tok))
    chunks = _feed(dec, ids, stops=["STOP"], finish=FinishStop("STOP"))
    assert "".join(chunks) == "move left "
    # nothing after the stop string's first character was ever emitted, even mid-stream
    emitted = ""
    for c in chunks:
        emitted += c
        assert "S" not in emitted


def test_partial_stop_prefix_is_released_when_it_does_not_match(tok):
    ids = tok("go ST go")["input_ids"]
    dec = IncrementalDecoder(tok, len(tok))
    assert "".join(_feed(dec, ids, stops=["STOP"])) == "go ST go"


def test_out_of_vocabulary_ids_are_not_decoded(tok):
    dec = IncrementalDecoder(tok, len(tok))
    pads = [len(tok) + 12345, len(tok) + 777]
    ids = tok("ok")["input_ids"]
    assert "".join(_feed(dec, ids, context=pads)) == "ok"
