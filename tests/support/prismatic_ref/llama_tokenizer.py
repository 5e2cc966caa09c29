"""An offline Llama-2-style tokenizer, trained deterministically on robot instructions.

It has the shape of OpenVLA's tokenizer in miniature: a SentencePiece-like BPE with byte
fallback (``<unk>``=0, ``<s>``=1, ``</s>``=2, then the 256 ``<0xNN>`` byte pieces), a base
vocabulary of exactly ``n_base`` ids that contains the lone ``"▁"`` piece (29871 in Llama-2),
and one added ``<PAD>`` token with id ``n_base`` (32000 in OpenVLA).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import LlamaTokenizer

SPECIALS = ("<unk>", "<s>", "</s>")
BYTE_PIECES = tuple(f"<0x{b:02X}>" for b in range(256))
PAD_TOKEN = "<PAD>"
SPACE_PIECE = "▁"

_VERBS = (
    "pick up", "put", "place", "move", "push", "pull", "open", "close", "lift", "grasp",
    "stack", "wipe", "fold", "unfold", "flip", "turn on", "turn off", "slide", "drop", "insert",
    "rotate", "pour", "sweep", "hang", "knock over",
)  # fmt: skip
_COLORS = ("red", "green", "blue", "yellow", "orange", "purple", "white", "black", "pink", "gray")
_OBJECTS = (
    "block", "cup", "bowl", "sponge", "spoon", "fork", "knife", "towel", "drawer", "cabinet",
    "carrot", "eggplant", "banana", "apple", "can", "bottle", "marker", "cloth", "lid", "pot",
    "pan", "plate", "microwave", "faucet", "switch", "cube", "mug", "basket", "tray", "book",
)  # fmt: skip
_PLACES = (
    "on the table", "into the sink", "onto the plate", "in the drawer", "next to the pot",
    "to the left", "to the right", "on top of the stove", "inside the basket", "near the wall",
)  # fmt: skip
_ADVERBS = (
    "slowly", "quickly", "gently", "firmly", "precisely", "smoothly", "steadily", "carefully",
    "horizontally", "vertically", "diagonally", "clockwise", "counterclockwise", "halfway",
)  # fmt: skip
_PARTS = (
    "gripper", "wrist", "elbow", "shoulder", "fingers", "suction cup", "end effector",
    "left arm", "right arm", "base", "camera", "joystick",
)  # fmt: skip
_TASKS = (
    "separate the dishes", "arrange the vegetables", "organize the utensils",
    "assemble the toy", "tighten the screw", "unscrew the bottle cap", "water the plant",
    "sort the laundry", "empty the dishwasher", "refill the container", "scrub the counter",
    "untangle the cable", "charge the battery", "unplug the kettle", "measure the flour",
    "peel the potato", "squeeze the lemon", "throw away the wrapper", "recycle the cardboard",
    "button the jacket", "zip the backpack", "tie the shoelace", "straighten the pillow",
    "vacuum the carpet", "feed the goldfish", "adjust the thermostat", "shuffle the cards",
)  # fmt: skip


def corpus() -> list[str]:
    """OpenVLA-style prompts over every verb x colour x object, plus placements and bytes.

    The product is large enough for the BPE trainer to reach the requested vocabulary; the
    order is fixed so a build is reproducible.
    """
    lines = []
    for verb, color, obj in itertools.product(_VERBS, _COLORS, _OBJECTS):
        lines.append(f"In: What action should the robot take to {verb} the {color} {obj}?\nOut:")
    for (verb, obj), place in itertools.product(itertools.product(_VERBS, _OBJECTS), _PLACES):
        lines.append(f"{verb.capitalize()} the {obj} {place}, then stop.")
    for adverb, part, task in itertools.product(_ADVERBS, _PARTS, _TASKS):
        lines.append(f"Carefully {task} using the {part}, {adverb}.")
    lines.append("0123456789 ,.;:!?'\"()[]{}<>-_+=/*&%$#@ ABCDEFGHIJKLMNOPQRSTUVWXYZ")
    return lines


def _trained_vocab_and_merges(n_pieces: int) -> tuple[list[str], list[tuple[str, str]]]:
    """Train `n_pieces` pieces (specials included) on the corpus; return them in id order."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    # split=True while training keeps merges inside words, as SentencePiece does; encoding
    # uses the unsplit Metaspace of transformers' LlamaTokenizer, which then gives the same ids.
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPACE_PIECE, prepend_scheme="first")
    trainer = trainers.BpeTrainer(
        vocab_size=n_pieces, special_tokens=list(SPECIALS), min_frequency=1, show_progress=False
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    model = json.loads(tok.to_str())["model"]
    pieces = sorted(model["vocab"], key=model["vocab"].__getitem__)
    return pieces, [tuple(m) for m in model["merges"]]


def build_llama_tokenizer(n_base: int = 1024) -> LlamaTokenizer:
    """The tokenizer: `n_base` base ids (specials, bytes, trained pieces) plus ``<PAD>``."""
    from transformers import LlamaTokenizer

    n_pieces = n_base - len(BYTE_PIECES)
    pieces, merges = _trained_vocab_and_merges(n_pieces)
    if len(pieces) != n_pieces:
        raise ValueError(f"the corpus yields {len(pieces)} pieces, not the {n_pieces} asked for")
    # Llama-2's order: specials, then the byte pieces, then the learned pieces.
    ordered = [*SPECIALS, *BYTE_PIECES, *pieces[len(SPECIALS) :]]
    if SPACE_PIECE not in ordered:
        raise ValueError(f"the trained vocabulary lacks the {SPACE_PIECE!r} piece")
    tok = LlamaTokenizer(
        vocab={piece: i for i, piece in enumerate(ordered)},
        merges=merges,
        add_bos_token=True,
        add_eos_token=False,
        legacy=False,
    )
    tok.add_special_tokens({"pad_token": PAD_TOKEN})
    return tok


def save_llama_tokenizer(out_dir: Path, n_base: int = 1024) -> None:
    """Write the tokenizer files as OpenVLA's folder has them (a `LlamaTokenizer` config)."""
    tok = build_llama_tokenizer(n_base)
    tok.save_pretrained(str(out_dir))
    config_path = Path(out_dir) / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    # AutoTokenizer resolves the class from this name, without remote code; the rest are the
    # values OpenVLA's tokenizer_config.json has.
    config.update(
        tokenizer_class="LlamaTokenizer",
        add_bos_token=True,
        add_eos_token=False,
        legacy=False,
        model_max_length=2048,
        padding_side="right",
    )
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
