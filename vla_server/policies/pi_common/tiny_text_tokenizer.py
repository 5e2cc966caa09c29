"""The PaliGemma-like text tokenizer of the pi families' tiny checkpoints, trained
deterministically offline: Gemma's special ids (`<pad>` 0, `<eos>` 1, `<bos>` 2, `<unk>` 3), a
BPE over "▁"-marked words trained on prompts of the `Task: ..., State: ...;` form, BOS added in
front of every encoding as Gemma's tokenizer does, then `<locNNNN>` tokens for the FAST band and
`<segNNN>` tokens for the `fast_skip_tokens` at the top of the vocabulary: PaliGemma id
`V - 1 - skip - t` is FAST token `t`, as in the real 257152-id vocabulary.
"""

from __future__ import annotations

from typing import Any

import numpy as np

PAD, EOS, BOS, UNK = "<pad>", "<eos>", "<bos>", "<unk>"
_WORDS = [
    "pick",
    "up",
    "place",
    "put",
    "the",
    "a",
    "red",
    "blue",
    "green",
    "yellow",
    "block",
    "cup",
    "bowl",
    "plate",
    "drawer",
    "sponge",
    "towel",
    "lid",
    "into",
    "onto",
    "on",
    "in",
    "of",
    "to",
    "from",
    "left",
    "right",
    "top",
    "open",
    "close",
    "push",
    "pull",
    "lift",
    "stack",
    "slide",
    "grasp",
]


def _prompt_corpus() -> list[str]:
    rng = np.random.default_rng(7)
    lines = []
    for _ in range(1500):
        words = " ".join(rng.choice(_WORDS, size=int(rng.integers(2, 8))))
        state = " ".join(str(int(v)) for v in rng.integers(-1, 256, size=int(rng.integers(1, 9))))
        lines.append(f"Task: {words}, State: {state};\n")
        lines.append(f"Task: {words.capitalize()}, State: {state};\nAction: | done")
    return lines


def build_text_tokenizer(bpe_vocab: int, fast_vocab: int, skip: int) -> Any:
    """A `PreTrainedTokenizerFast` with `bpe_vocab` text ids, then `fast_vocab + skip` band ids."""
    from tokenizers import (
        AddedToken,
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="never")
    tok.decoder = decoders.Metaspace(prepend_scheme="never")
    alphabet = sorted(set("".join(_prompt_corpus())).union("▁", ".?!-'\"()"))
    trainer = trainers.BpeTrainer(
        vocab_size=bpe_vocab,
        special_tokens=[PAD, EOS, BOS, UNK],
        initial_alphabet=alphabet,
        show_progress=False,
    )
    tok.train_from_iterator(_prompt_corpus(), trainer)
    band = [f"<loc{i:04d}>" for i in range(fast_vocab)] + [f"<seg{i:03d}>" for i in range(skip)]
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in band])
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, tok.token_to_id(BOS))]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD, unk_token=UNK
    )
