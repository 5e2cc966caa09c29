"""The FAST codec and pi0-FAST's action side on the tiny checkpoint's tokenizers, against scipy's
DCT, LeRobot's formulas and the test-only reference decoder (tests/support/pi0fast_reference.py)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.fft import dct, idct

from tests.support import pi0fast_reference as ref
from tests.support.families import family_tokenizer
from vla_server.io_struct import FinishLength, FinishStop, abort
from vla_server.policies.base import ActionOutput
from vla_server.policies.pi0fast.detokenizer import FastActionDetokenizer
from vla_server.policies.pi0fast.fast_actions import FastActionTokenizer
from vla_server.policies.pi0fast.fast_codec import FastDecodeError, to_fast_tokens
from vla_server.policies.pi0fast.tiny import pi0fast_model_path
from vla_server.policies.pi0fast.tiny_tokenizers import synthetic_chunks
from vla_server.policies.pi_common.lerobot_normalizer import FeatureNormalizer
from vla_server.policies.pi_common.tiny_paligemma import STATE_STATS
from vla_server.policies.registry import detect


@pytest.fixture(scope="module")
def folder() -> str:
    return str(pi0fast_model_path("bare"))


@pytest.fixture(scope="module")
def fast(folder) -> FastActionTokenizer:
    return detect(folder).actions(family_tokenizer(folder))


def _out(rid: str, ids: list[int], end, count: int, relaxed: bool = False) -> ActionOutput:
    return ActionOutput(rid, ids, end, None, count, relaxed, None)


def chunks(n: int = 40) -> np.ndarray:
    return synthetic_chunks(n, 4, 3, seed=99)


def test_round_trip_of_quantised_chunks_is_exact(fast):
    scale = fast.codec.settings.scale
    for chunk in chunks():
        quantised = np.around(dct(chunk, axis=0, norm="ortho") * scale).astype(np.int64)
        tokens = fast.codec.encode(chunk)
        np.testing.assert_array_equal(fast.codec.coefficients(tokens, relaxed=False), quantised)
        expected = idct(quantised / scale, axis=0, norm="ortho")
        np.testing.assert_allclose(fast.codec.decode(tokens), expected, rtol=0, atol=1e-12)


def test_the_id_mapping_is_an_involution_onto_the_fast_vocabulary(fast):
    band = np.arange(fast.fast_ids().start, fast.fast_ids().stop)
    tokens = to_fast_tokens(band, fast.vocab_size, fast.spec.fast_skip_tokens)
    assert sorted(tokens.tolist()) == list(range(fast.codec.settings.vocab_size))
    back = to_fast_tokens(tokens, fast.vocab_size, fast.spec.fast_skip_tokens)
    np.testing.assert_array_equal(back, band)
    assert band.max() == fast.vocab_size - 1 - fast.spec.fast_skip_tokens


def _pg(fast: FastActionTokenizer, chunk: np.ndarray) -> list[int]:
    tokens = fast.codec.encode(chunk)
    return to_fast_tokens(tokens, fast.vocab_size, fast.spec.fast_skip_tokens).tolist()


def test_a_wellformed_chunk_decodes_strictly_like_the_reference(fast, folder):
    for chunk in chunks(8):
        ids = _pg(fast, chunk)
        expected = ref.fast_actions(folder, ids, relaxed=False)
        np.testing.assert_allclose(fast.decode_chunk(ids, relaxed=False), expected, atol=1e-6)


def test_malformed_sequences_are_errors_strictly_and_padded_or_cut_relaxed(fast, folder):
    ids = _pg(fast, chunks(1)[0])
    long = ids + _pg(fast, chunks(2)[1])
    for bad in (ids[:-1], long, []):
        with pytest.raises(FastDecodeError, match="coefficients"):
            fast.decode_chunk(bad, relaxed=False)
        expected = ref.fast_actions(folder, bad, relaxed=True)
        np.testing.assert_allclose(fast.decode_chunk(bad, relaxed=True), expected, atol=1e-6)
    # Relaxed truncation keeps the first chunk's coefficients exactly.
    np.testing.assert_allclose(
        fast.decode_chunk(long, relaxed=True), fast.decode_chunk(ids, relaxed=False), atol=1e-6
    )
    with pytest.raises(FastDecodeError, match="not a FAST token"):
        fast.decode_chunk([*ids, fast.end_ids[0]], relaxed=True)


def test_the_detokenizer_emits_one_chunk_when_the_end_token_arrives(fast):
    detok = FastActionDetokenizer(fast)
    ids = _pg(fast, chunks(1)[0])
    first = detok.step(_out("a", ids[:3], None, 4))
    assert first.actions == [] and first.error is None
    done = detok.step(_out("a", [*ids[3:], fast.end_ids[0]], None, 4))
    np.testing.assert_allclose(done.actions, fast.decode_chunk(ids, relaxed=False), atol=1e-7)
    assert done.count == 4
    end = detok.step(_out("a", [], FinishStop(fast.end_ids[0]), 4))
    assert end.actions == [] and end.error is None  # the chunk went out once
    # A request that asked for 2 actions gets the chunk's first 2, at EOS as well.
    two = detok.step(
        ActionOutput(
            "b", [*ids, fast.eos_ids[0]], FinishStop(fast.eos_ids[0]), None, 2, False, None
        )
    )
    np.testing.assert_allclose(two.actions, done.actions[:2], atol=0)


def test_the_detokenizer_reports_a_malformed_chunk_and_decodes_nothing_aborted(fast):
    detok = FastActionDetokenizer(fast)
    ids = _pg(fast, chunks(1)[0])
    failed = detok.step(_out("a", ids[:-1], FinishLength(len(ids) - 1), 4))
    assert failed.actions == [] and "coefficients" in failed.error
    relaxed = detok.step(_out("b", ids[:-1], FinishLength(len(ids) - 1), 4, relaxed=True))
    assert len(relaxed.actions) == 4 and relaxed.error is None
    aborted = detok.step(_out("c", ids, abort(), 4))
    assert aborted.actions == [] and aborted.error is None


@pytest.mark.parametrize(
    ("mode", "stats"),
    [
        ("QUANTILES", {"q01": [-1.0, 2.0, 5.0], "q99": [1.0, 6.0, 5.0]}),
        ("MEAN_STD", {"mean": [0.5, -1.0, 2.0], "std": [2.0, 0.1, 0.0]}),
        ("MIN_MAX", {"min": [-3.0, 0.0, 1.0], "max": [3.0, 10.0, 1.0]}),
    ],
)
def test_normaliser_follows_lerobot(mode, stats):
    import torch

    arrays = {k: np.asarray(v, dtype=np.float32) for k, v in stats.items()}
    norm = FeatureNormalizer(mode, arrays)
    x = np.asarray([0.25, 3.0, -7.5], dtype=np.float32)
    t = {k: torch.tensor(v) for k, v in arrays.items()}
    xt = torch.tensor(x)
    if mode == "MEAN_STD":
        forward, inverse = (xt - t["mean"]) / (t["std"] + 1e-8), xt * t["std"] + t["mean"]
    else:
        lo, hi = (t["q01"], t["q99"]) if mode == "QUANTILES" else (t["min"], t["max"])
        denom = torch.where(hi - lo == 0, torch.tensor(1e-8), hi - lo)
        forward, inverse = 2.0 * (xt - lo) / denom - 1.0, (xt + 1.0) * denom / 2.0 + lo
    np.testing.assert_array_equal(norm.normalize(x), forward.numpy())
    np.testing.assert_array_equal(norm.unnormalize(x), inverse.numpy())


def test_state_bins_are_openpis_digitize_after_normalisation(fast, folder):
    q01, q99 = np.asarray(STATE_STATS["q01"]), np.asarray(STATE_STATS["q99"])
    raw = q01 + (q99 - q01) * (np.asarray([-1.5, -1.0, 0.999, 1.0]) + 1) / 2  # normalised values
    assert fast.state_bins(raw.tolist()) == [-1, 0, 255, 255]
    for state in ([0.1, 1.2, 0.0, 3.3], [-2.0, 0.5, 0.499, 2.0], [9.0, -9.0, 0.2, 3.0]):
        assert fast.state_bins(state) == ref.state_bins(folder, state)
