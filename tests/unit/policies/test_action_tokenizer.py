"""Action decoding against the published OpenVLA formula, implemented independently here.

Reference: openvla/openvla ``prismatic/vla/action_tokenizer.py`` (``ActionTokenizer``:
``bins = np.linspace(min_action, max_action, n_bins)``, centres between edges, ``__call__`` maps
``vocab_size - np.digitize(clip(a), bins)``; ``decode_token_ids_to_actions``:
``clip(vocab_size - ids - 1, 0, n_centres - 1)``) and ``modeling_prismatic.py``
``OpenVLAForActionPrediction.predict_action`` (``vocab_size = text vocab - pad_to_multiple_of``,
``np.where(mask, 0.5 * (a + 1) * (q99 - q01) + q01, a)``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, models
from transformers import PreTrainedTokenizerFast

from vla_server.policies.bin_actions.action_tokenizer import ActionDecodeError, ActionTokenizer

BASE_VOCAB = 600  # tokenizer.vocab_size
ADDED = ["<image>", "<pad>"]  # added tokens: ids 600, 601 -> len(tokenizer) == 602
PADDED_MODEL_VOCAB = 640  # embedding rows, padded to a multiple of 64
Q01 = [-0.03, -0.02, -0.04, -0.1, -0.2, -0.3, 0.0]
Q99 = [0.03, 0.05, 0.04, 0.1, 0.25, 0.3, 1.0]
MASK = [True, True, True, True, True, True, False]


def openvla_decode(ids, vocab_size, q01, q99, mask, n_bins=256):
    bins = np.linspace(-1, 1, n_bins)
    bin_centers = (bins[:-1] + bins[1:]) / 2.0
    discretized = vocab_size - np.asarray(ids)
    discretized = np.clip(discretized - 1, a_min=0, a_max=bin_centers.shape[0] - 1)
    normalized = bin_centers[discretized]
    high, low = np.array(q99), np.array(q01)
    return np.where(mask, 0.5 * (normalized + 1) * (high - low) + low, normalized)


def openvla_encode(actions, vocab_size, q01, q99, mask, n_bins=256):
    bins = np.linspace(-1, 1, n_bins)
    high, low = np.array(q99), np.array(q01)
    normalized = np.where(mask, 2 * (actions - low) / (high - low) - 1, actions)
    return vocab_size - np.digitize(np.clip(normalized, -1, 1), bins)


def stats(q01=Q01, q99=Q99, mask=MASK) -> dict:
    return {"action": {"q01": q01, "q99": q99, "mask": mask, "mean": [0.0] * len(q01)}}


def write_tokenizer(folder: Path) -> PreTrainedTokenizerFast:
    vocab = {f"t{i}": i for i in range(BASE_VOCAB)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    tokenizer.add_special_tokens(ADDED)
    tokenizer.save(str(folder / "tokenizer.json"))
    return PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))


def write_openvla_config(folder: Path, norm_stats: dict, **extra: object) -> None:
    config = {
        # OpenVLA declares its bins' vocabulary as text vocab - pad_to_multiple_of.
        "text_config": {"vocab_size": BASE_VOCAB + 64},
        "pad_to_multiple_of": 64,
        "norm_stats": norm_stats,
    }
    (folder / "config.json").write_text(json.dumps(config | extra))


def write_action_json(folder: Path, **fields: object) -> None:
    spec = {
        "n_bins": 256,
        "action_dim": 7,
        "min_action": -1.0,
        "max_action": 1.0,
        "bin_token_ids": None,
        "norm_stats": {"bridge": stats()},
    }
    (folder / "action_tokenizer.json").write_text(json.dumps(spec | fields))


@pytest.fixture
def openvla_folder(tmp_path: Path) -> Path:
    write_tokenizer(tmp_path)
    write_openvla_config(tmp_path, {"bridge": stats(), "fractal": stats(Q01[::-1], Q99[::-1])})
    return tmp_path


def every_bin_token_at_every_position(first: int, end: int) -> np.ndarray:
    ids = np.arange(first, end)
    return np.stack([np.roll(ids, shift)[:7] for shift in range(0, len(ids), 3)])


def test_hf_vocabulary_semantics_behind_the_trap(openvla_folder: Path):
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(openvla_folder / "tokenizer.json"))
    assert tokenizer.vocab_size == BASE_VOCAB
    assert len(tokenizer) == BASE_VOCAB + len(ADDED)
    assert tokenizer.convert_tokens_to_ids(ADDED) == [600, 601]


def test_openvla_config_decodes_exactly_like_openvla(openvla_folder: Path):
    tok = ActionTokenizer.from_folder(openvla_folder, BASE_VOCAB)
    assert tok is not None and tok.action_dim == 7 and tok.n_bins == 256
    assert tok.bin_token_ids() == range(BASE_VOCAB - 256, BASE_VOCAB)
    assert tok.unnorm_keys() == ["bridge", "fractal"]
    for key, (q01, q99) in {"bridge": (Q01, Q99), "fractal": (Q01[::-1], Q99[::-1])}.items():
        for ids in every_bin_token_at_every_position(tok.first, tok.end):
            expected = openvla_decode(ids, BASE_VOCAB, q01, q99, MASK)
            np.testing.assert_array_equal(tok.decode(ids.tolist(), key), expected)


def test_clipping_of_the_lowest_bin_id_and_the_unmasked_gripper(openvla_folder: Path):
    tok = ActionTokenizer.from_folder(openvla_folder, BASE_VOCAB)
    bins = np.linspace(-1, 1, 256)
    centers = (bins[:-1] + bins[1:]) / 2
    lowest_id = [tok.first] * 7  # digitize index 256 -> clipped onto the last centre
    second_lowest = [tok.first + 1] * 7
    np.testing.assert_array_equal(
        tok.decode(lowest_id, "bridge"), tok.decode(second_lowest, "bridge")
    )
    action = tok.decode([tok.end - 1] * 7, "bridge")  # the highest id is the lowest bin
    assert action[6] == centers[0]  # mask False: the normalised value passes through
    assert action[0] == pytest.approx(0.5 * (centers[0] + 1) * (Q99[0] - Q01[0]) + Q01[0])


def test_action_tokenizer_json_with_last_bins_and_with_an_explicit_first_id(tmp_path: Path):
    write_tokenizer(tmp_path)
    write_action_json(tmp_path)
    tok = ActionTokenizer.from_folder(tmp_path, BASE_VOCAB)
    ids = every_bin_token_at_every_position(tok.first, tok.end)
    for row in ids:
        np.testing.assert_array_equal(
            tok.decode(row.tolist(), "bridge"), openvla_decode(row, BASE_VOCAB, Q01, Q99, MASK)
        )
    write_action_json(tmp_path, bin_token_ids={"first": 100}, n_bins=32)
    tok = ActionTokenizer.from_folder(tmp_path, BASE_VOCAB)
    assert tok.bin_token_ids() == range(100, 132)
    for row in every_bin_token_at_every_position(100, 132):
        expected = openvla_decode(row, 132, Q01, Q99, MASK, n_bins=32)  # "vocab" ends at 132
        np.testing.assert_array_equal(tok.decode(row.tolist(), "bridge"), expected)


def test_custom_bin_range_maps_its_ends_onto_q01_and_q99(tmp_path: Path):
    write_action_json(tmp_path, min_action=-2.0, max_action=2.0, n_bins=5)
    tok = ActionTokenizer.from_folder(tmp_path, BASE_VOCAB)
    centers = np.array([-1.5, -0.5, 0.5, 1.5])  # between linspace(-2, 2, 5)
    for index, center in enumerate(centers):
        action = tok.decode([tok.end - 1 - index] * 7, "bridge")
        fraction = (center + 2) / 4
        np.testing.assert_allclose(action[:6], np.add(Q01, fraction * np.subtract(Q99, Q01))[:6])
        assert action[6] == center


def test_padded_vocabulary_trap_is_refused(openvla_folder: Path):
    # The trap is real: counting from the padded size shifts every decoded bin.
    ids = list(range(BASE_VOCAB - 7, BASE_VOCAB))
    right = openvla_decode(ids, BASE_VOCAB, Q01, Q99, MASK)
    wrong = openvla_decode(ids, PADDED_MODEL_VOCAB, Q01, Q99, MASK)
    assert not np.allclose(right, wrong)
    for wrong_size in (PADDED_MODEL_VOCAB, BASE_VOCAB + len(ADDED)):  # padded, len(tokenizer)
        with pytest.raises(ValueError, match="pass tokenizer.vocab_size"):
            ActionTokenizer.from_folder(openvla_folder, wrong_size)


def test_config_declaring_another_vocabulary_is_refused_naming_both(tmp_path: Path):
    write_tokenizer(tmp_path)
    write_openvla_config(tmp_path, {"bridge": stats()}, text_config={"vocab_size": 640})
    with pytest.raises(ValueError, match=r"pad_to_multiple_of = 576 ids.* has 600"):
        ActionTokenizer.from_folder(tmp_path, BASE_VOCAB)


def test_reserved_ids_catch_the_trap_without_a_tokenizer_json(openvla_folder: Path):
    (openvla_folder / "tokenizer.json").unlink()  # e.g. a sentencepiece-only checkpoint
    reserved = [0, 1, 2, 600, 601]
    for wrong_size in (PADDED_MODEL_VOCAB, BASE_VOCAB + len(ADDED)):
        with pytest.raises(ValueError, match=r"include reserved token ids \[600"):
            ActionTokenizer.from_folder(openvla_folder, wrong_size, reserved_token_ids=reserved)
    tok = ActionTokenizer.from_folder(openvla_folder, BASE_VOCAB, reserved_token_ids=reserved)
    assert tok is not None and not any(tok.is_bin(t) for t in reserved)


def test_allowed_mask_marks_exactly_the_bins(openvla_folder: Path):
    tok = ActionTokenizer.from_folder(openvla_folder, BASE_VOCAB)
    mask = tok.allowed_mask(PADDED_MODEL_VOCAB)
    assert mask.shape == (PADDED_MODEL_VOCAB,) and mask.dtype == torch.bool
    assert mask.nonzero().flatten().tolist() == list(range(BASE_VOCAB - 256, BASE_VOCAB))
    with pytest.raises(ValueError, match="ends before the action bins"):
        tok.allowed_mask(BASE_VOCAB - 1)


def test_encode_matches_openvla_tokenisation_and_round_trips(openvla_folder: Path):
    tok = ActionTokenizer.from_folder(openvla_folder, BASE_VOCAB)
    rng = np.random.default_rng(0)
    low, high = np.array(Q01), np.array(Q99)
    actions = low + rng.random((50, 7)) * (high - low)
    actions[:, 6] = rng.random(50) * 2 - 1  # the unmasked gripper lives in [-1, 1]
    ids = tok.encode(actions, "bridge")
    assert ids == openvla_encode(actions, BASE_VOCAB, Q01, Q99, MASK).reshape(-1).tolist()
    half_bin = 1 / 255  # half of 2 / 255, in normalised units
    tolerance = np.where(MASK, half_bin * (high - low) / 2, half_bin) + 1e-12
    for row, action in zip(np.reshape(ids, (50, 7)), actions, strict=True):
        assert np.all(np.abs(tok.decode(row.tolist(), "bridge") - action) <= tolerance)


def test_decode_errors_name_the_problem(openvla_folder: Path):
    tok = ActionTokenizer.from_folder(openvla_folder, BASE_VOCAB)
    good = list(range(tok.first, tok.first + 7))
    with pytest.raises(ActionDecodeError, match=r"token 5 at position 2 .* not an action bin"):
        tok.decode(good[:2] + [5] + good[3:], "bridge")
    with pytest.raises(ActionDecodeError, match=r"token 600 at position 6 .* not an action bin"):
        tok.decode(good[:6] + [600], "bridge")  # an added token right after the bins
    with pytest.raises(ActionDecodeError, match="needs 7 tokens"):
        tok.decode(good[:6], "bridge")
    with pytest.raises(
        ActionDecodeError, match=r"unknown unnorm_key 'kuka'.*\['bridge', 'fractal'\]"
    ):
        tok.decode(good, "kuka")
    with pytest.raises(ActionDecodeError, match=r"unnorm_key is required.*\['bridge', 'fractal'\]"):
        tok.decode(good, None)


def test_nan_statistics_fail_the_decode_never_zero(tmp_path: Path):
    q01 = list(Q01)
    q01[3] = math.nan
    q01[6] = math.nan  # unmasked: unused, so harmless
    write_openvla_config(tmp_path, {"broken": stats(q01=q01), "fine": stats()})
    tok = ActionTokenizer.from_folder(tmp_path, BASE_VOCAB)
    ids = list(range(tok.first, tok.first + 7))
    with pytest.raises(ActionDecodeError, match=r"'broken' give a non-finite action in dims \[3\]"):
        tok.decode(ids, "broken")
    assert np.isfinite(tok.decode(ids, "fine")).all()
    with pytest.raises(ActionDecodeError, match="non-finite"):
        tok.encode(np.zeros(7), "broken")


def test_single_key_is_the_default_and_no_stats_means_normalised_output(tmp_path: Path):
    write_action_json(tmp_path)
    tok = ActionTokenizer.from_folder(tmp_path, BASE_VOCAB)
    ids = list(range(tok.first, tok.first + 7))
    np.testing.assert_array_equal(tok.decode(ids, None), tok.decode(ids, "bridge"))
    write_action_json(tmp_path, norm_stats={})
    tok = ActionTokenizer.from_folder(tmp_path, BASE_VOCAB)
    np.testing.assert_array_equal(
        tok.decode(ids, None), openvla_decode(ids, BASE_VOCAB, [0] * 7, [0] * 7, [False] * 7)
    )


def test_no_action_declaration_gives_none(tmp_path: Path):
    assert ActionTokenizer.from_folder(tmp_path, BASE_VOCAB) is None
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llava"}))
    assert ActionTokenizer.from_folder(tmp_path, BASE_VOCAB) is None


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ({"n_bins": 1}, "n_bins must be at least 2"),
        ({"n_bins": 0}, "n_bins must be a positive integer"),
        ({"action_dim": "7"}, "action_dim must be a positive integer"),
        ({"min_action": 1.0}, "min_action must be below max_action"),
        ({"bin_token_ids": {"start": 3}}, "bin_token_ids must be null"),
        ({"bin_token_ids": {"first": -1}}, "bin_token_ids.first must be an integer >= 0"),
        ({"bin_token_ids": {"first": 500}}, "action bins 500..755 do not fit"),
        (
            {"norm_stats": {"x": stats(q01=Q01[:6])}},
            r"norm_stats\['x'\].action.q01 has shape \[6\]",
        ),
        ({"norm_stats": {"x": {"action": {"q01": Q01}}}}, "needs action.q01 and action.q99"),
        ({"norm_stats": None}, "norm_stats must be an object"),
    ],
)
def test_bad_action_tokenizer_json_is_named(tmp_path: Path, fields: dict, fragment: str):
    write_action_json(tmp_path, **fields)
    with pytest.raises(ValueError, match=fragment):
        ActionTokenizer.from_folder(tmp_path, BASE_VOCAB)


def test_openvla_config_keys_must_agree_on_the_dimension(tmp_path: Path):
    write_openvla_config(tmp_path, {"a": stats(), "b": stats(Q01[:6], Q99[:6], MASK[:6])})
    with pytest.raises(ValueError, match="disagree on the action dimension"):
        ActionTokenizer.from_folder(tmp_path, BASE_VOCAB)


def test_a_failed_action_stream_stays_failed_until_the_request_finishes(tmp_path: Path):
    from vla_server.io_struct import FinishLength
    from vla_server.policies.base import ActionOutput
    from vla_server.policies.bin_actions.detokenizer import BinActionDecoder

    def step(rid: str, ids: list[int], key: str, finished: bool):
        end = FinishLength(len(ids)) if finished else None
        return detok.step(ActionOutput(rid, ids, end, key, 0, False, None))

    q01 = list(Q01)
    q01[2] = math.nan
    write_openvla_config(tmp_path, {"broken": stats(q01=q01), "fine": stats()})
    tok = ActionTokenizer.from_folder(tmp_path, BASE_VOCAB)
    assert tok is not None
    detok = BinActionDecoder(tok)
    ids = list(range(tok.first, tok.first + 7))
    ok = step("a", ids[:3], "fine", False)
    assert (ok.actions, ok.count, ok.error) == ([], 0, None)
    ok = step("a", ids[3:] + ids[:2], "fine", True)
    assert ok.count == 1 and ok.error is None and "a" not in detok.states
    first = step("b", ids[:4], "broken", False)
    failed = step("b", ids[4:] + ids[:3], "broken", False)
    assert first.error is None
    assert failed.actions == [] and failed.count == 0
    assert failed.error is not None and "'broken'" in failed.error and "dims [2]" in failed.error
    # Tokens sent before the abort lands: not decoded (from a wrong offset), still the error.
    later = step("b", ids[3:], "broken", False)
    assert (later.actions, later.count, later.error) == ([], 0, failed.error)
    end = step("b", [], "broken", True)
    assert end.error == failed.error and detok.states == {}
