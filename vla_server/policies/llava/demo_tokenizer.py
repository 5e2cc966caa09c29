"""Tokenizer of the embedded demo checkpoint: a byte-level BPE trained on a fixed corpus.

Layout of the ids (see `vla_server.policies.llava.demo` for the numbers this recipe produces):

- `0..5`: the special tokens, in the order of `SPECIAL_TOKENS`.
- then the 256 byte symbols and the learned BPE merges;
- then the `N_ACTION_BINS` action tokens, at the very end of the tokenizer's vocabulary.
  They are appended as `<act_255>, <act_254>, ..., <act_0>`, so `<act_k>` has id `V - 1 - k`
  where `V = len(tokenizer)`: its name is exactly the OpenVLA bin index `V - id - 1`.

The corpus is generated from templates in a fixed order, so training is reproducible.
"""

from __future__ import annotations

import itertools

from tokenizers import AddedToken, Tokenizer
from transformers import PreTrainedTokenizerFast

from vla_server.model.tokenizer import train_byte_level_bpe

PAD, BOS, EOS = "<|pad|>", "<|bos|>", "<|eos|>"
IM_START, IM_END, IMAGE = "<|im_start|>", "<|im_end|>", "<image>"
SPECIAL_TOKENS = (PAD, BOS, EOS, IM_START, IM_END, IMAGE)
N_ACTION_BINS = 256
MODEL_MAX_LENGTH = 2048
BPE_VOCAB_SIZE = 1024  # an upper bound: the corpus runs out of merges first

# ChatML-style turns. Image parts (HF "image" or OpenAI "image_url") become one `<image>`,
# which the processor expands to the vision tower's patch count.
CHAT_TEMPLATE = """\
{{- bos_token -}}
{%- for message in messages -%}
  {{- '<|im_start|>' + message['role'] + '\\n' -}}
  {%- if message['content'] is string -%}
    {{- message['content'] -}}
  {%- else -%}
    {%- for part in message['content'] -%}
      {%- if part['type'] in ['image', 'image_url'] -%}
        {{- '<image>' -}}
      {%- elif part['type'] == 'text' -%}
        {{- part['text'] -}}
      {%- endif -%}
    {%- endfor -%}
  {%- endif -%}
  {{- '<|im_end|>\\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<|im_start|>assistant\\n' -}}
{%- endif -%}
"""

_VERBS = ("pick up", "place", "push", "open", "close", "move", "grasp", "lift", "stack", "slide")
_OBJECTS = (
    "the red block",
    "the blue cup",
    "the green bowl",
    "the drawer",
    "the sponge",
    "the carrot",
    "the spoon",
    "the towel",
    "the lid",
    "the yellow cube",
    "the bottle",
)
_PLACES = (
    "on the table",
    "into the sink",
    "onto the plate",
    "to the left",
    "to the right",
    "next to the pot",
    "inside the box",
    "off the shelf",
)


def action_token(bin_index: int) -> str:
    return f"<act_{bin_index}>"


def demo_corpus() -> list[str]:
    """Robot-instruction-like lines, in a fixed order."""
    lines = []
    for verb, obj, place in itertools.product(_VERBS, _OBJECTS, _PLACES):
        lines.append(f"{verb} {obj} {place}")
        lines.append(f"In: What action should the robot take to {verb} {obj} {place}?\nOut:")
    lines += [
        f"Robot arm, {verb} {obj} slowly and carefully." for verb in _VERBS for obj in _OBJECTS
    ]
    return lines


def _train_bpe() -> Tokenizer:
    tok = train_byte_level_bpe(demo_corpus(), BPE_VOCAB_SIZE, SPECIAL_TOKENS)
    # Highest bin index first, so the last id of the vocabulary is `<act_0>` (OpenVLA order).
    tok.add_tokens(
        [
            AddedToken(action_token(k), special=False, normalized=False)
            for k in reversed(range(N_ACTION_BINS))
        ]
    )
    return tok


def build_demo_tokenizer() -> PreTrainedTokenizerFast:
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=_train_bpe(),
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        extra_special_tokens={"image_token": IMAGE},
        model_max_length=MODEL_MAX_LENGTH,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer
