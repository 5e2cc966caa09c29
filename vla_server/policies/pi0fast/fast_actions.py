"""pi0-FAST's actions: a LeRobot `pi0_fast` folder's FAST tokenizer, its statistics, and what
an action request on it needs (the tokens it may generate, the state in its prompt, the chunk).

* Tokens: an action request generates FAST tokens as PaliGemma ids (`fast_codec`), ended by
  `|` (the tokens "|" and "▁|") or EOS; sampling is constrained to exactly those ids.
* State: normalised with the checkpoint's statistics (not padded, as LeRobot >= 0.5), then
  discretised into 256 bins over [-1, 1]: `digitize(s, linspace(-1, 1, 257)[:-1]) - 1`
  (openpi's `PaligemmaTokenizer`; values below -1 give -1).
* Chunk: the FAST decode of the tokens before `|`, its first `action_dim` dims unnormalised
  with the postprocessor's statistics.

The FAST tokenizer's files come from the checkpoint's `fast_tokenizer/` subfolder, else from
`action_tokenizer_name` as a local folder (`pi_common.tokenizer_folder`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from vla_server.model.config import ModelConfig
from vla_server.policies.pi0fast.fast_codec import FastCodec, FastDecodeError, to_fast_tokens
from vla_server.policies.pi_common.lerobot_config import LeRobotPolicySpec
from vla_server.policies.pi_common.lerobot_normalizer import FeatureNormalizer, policy_normalizers
from vla_server.policies.pi_common.policy_inputs import discretize_state
from vla_server.policies.pi_common.tokenizer_folder import tokenizer_folder

FAST_SUBFOLDER = "fast_tokenizer"
END_TOKENS = ("|", "▁|")


class FastActionTokenizer:
    """The action side of a pi0-FAST checkpoint (the OpenVLA counterpart: `ActionTokenizer`)."""

    kind = "fast"

    def __init__(
        self,
        codec: FastCodec,
        spec: LeRobotPolicySpec,
        vocab_size: int,
        end_ids: tuple[int, ...],
        eos_ids: tuple[int, ...],
        normalizers: tuple[FeatureNormalizer, FeatureNormalizer],
    ):
        self.codec = codec
        self.spec = spec
        self.vocab_size = vocab_size  # the model config's text vocabulary, not len(tokenizer)
        self.end_ids = end_ids  # "|": the chunk is complete
        self.eos_ids = eos_ids
        self.state_norm, self.action_norm = normalizers
        self.action_dim = spec.action_dim
        self.horizon = codec.horizon
        if codec.dim < self.action_dim:
            raise ValueError(
                f"the FAST tokenizer decodes {codec.dim} dims, the policy outputs {self.action_dim}"
            )
        first = self.fast_id(codec.settings.vocab_size - 1)
        if first < 0 or first <= max(end_ids, default=-1):
            raise ValueError(
                f"FAST ids start at {first}: vocab_size {vocab_size} leaves no room for "
                f"{codec.settings.vocab_size} FAST tokens after {spec.fast_skip_tokens} skipped"
            )

    @classmethod
    def from_folder(
        cls, folder: Path, spec: LeRobotPolicySpec, tokenizer: Any, config: ModelConfig
    ) -> FastActionTokenizer:
        """`config`: the backbone's decoder config (its vocabulary and EOS ids)."""
        fast = tokenizer_folder(folder, spec.action_tokenizer_name, FAST_SUBFOLDER)
        codec = FastCodec.from_folder(fast, spec.chunk_size, spec.action_dim)
        normalizers = policy_normalizers(folder, spec.normalization_mapping)
        ends = _end_ids(tokenizer)
        return cls(codec, spec, config.vocab_size, ends, config.eos_token_ids, normalizers)

    def fast_id(self, token: int) -> int:
        return int(to_fast_tokens(token, self.vocab_size, self.spec.fast_skip_tokens))

    def fast_ids(self) -> range:
        """The PaliGemma ids of the FAST tokens."""
        return range(self.fast_id(self.codec.settings.vocab_size - 1), self.fast_id(0) + 1)

    def allowed_mask(self, model_vocab_size: int) -> torch.Tensor:
        """bool [model_vocab_size]: the FAST ids, the end tokens and EOS (constrained sampling)."""
        mask = torch.zeros(model_vocab_size, dtype=torch.bool)
        band = self.fast_ids()
        mask[band.start : band.stop] = True
        mask[list(self.end_ids + self.eos_ids)] = True
        return mask

    def state_bins(self, state: list[float]) -> list[int]:
        """The discretised state of the prompt, from raw robot state."""
        return discretize_state(self.state_norm.normalize(np.asarray(state, dtype=np.float32)))

    def decode_chunk(self, ids: list[int], relaxed: bool) -> np.ndarray:
        """PaliGemma ids of FAST tokens -> float32 [horizon, action_dim] in robot units."""
        outside = [t for t in ids if t not in self.fast_ids()]
        if outside:
            raise FastDecodeError(f"token id {outside[0]} is not a FAST token")
        tokens = to_fast_tokens(ids, self.vocab_size, self.spec.fast_skip_tokens).tolist()
        chunk = self.codec.decode(tokens, relaxed).astype(np.float32)[:, : self.action_dim]
        actions = self.action_norm.unnormalize(chunk)
        if not np.isfinite(actions).all():
            raise FastDecodeError("the statistics give a non-finite action")
        return actions

    def describe(self) -> dict[str, Any]:
        band = self.fast_ids()
        return {
            "kind": self.kind,
            "action_dim": self.action_dim,
            "chunk_size": self.horizon,
            "fast_token_ids": [band.start, band.stop - 1],
            "end_token_ids": list(self.end_ids),
        }


def _end_ids(tokenizer: Any) -> tuple[int, ...]:
    vocab = tokenizer.get_vocab()
    ids = tuple(vocab[t] for t in END_TOKENS if t in vocab)
    if not ids:
        raise ValueError("the tokenizer has no '|' token, which ends pi0-FAST's action tokens")
    return ids
