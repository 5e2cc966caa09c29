"""The main process's multimodal work for one request: images (decoded, hashed and preprocessed
in a thread pool, off the event loop), placeholder expansion, the action-request checks, and a
prefix-LM model's (PaliGemma's) bidirectional prefix."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from vla_frames.image_errors import ImageInputError
from vla_frames.image_hash import format_mm_hash
from vla_server.config import FrontendConfig
from vla_server.errors import RequestError
from vla_server.frontend import openvla_prompt
from vla_server.frontend.generate_request import GenerateItem
from vla_server.frontend.pi0fast_prompt import Pi0FastPrompt
from vla_server.frontend.pi_policy_inputs import checked_state
from vla_server.io_struct import MMItem, Tensor
from vla_server.model.lerobot_config import LeRobotPolicySpec
from vla_server.multimodal.action_tokenizer import load_action_tokenizer
from vla_server.multimodal.fast_actions import FastActionTokenizer
from vla_server.multimodal.flow_actions import FlowActionPolicy
from vla_server.multimodal.image_input import MediaPolicy
from vla_server.multimodal.image_pipeline import ImagePipeline
from vla_server.multimodal.pixel_cache import PixelCache
from vla_server.multimodal.preprocessors import load_preprocessor
from vla_server.multimodal.prompt_expansion import PlaceholderError, expand_image_placeholders

MAX_ACTIONS_PER_REQUEST = 256


class MultimodalFrontend:
    def __init__(self, config: FrontendConfig, tokenizer: Any, info: dict[str, Any]):
        path = Path(config.checkpoint.model_path)
        self.max_images = config.max_images_per_request
        self.image_token_id: int | None = info.get("image_token_id")
        self.tokens_per_image: int = info.get("num_image_tokens") or 0
        self.vocab_size: int = info["vocab_size"]
        self.bos_token_id = tokenizer.bos_token_id
        # PaliGemma: the images come first (before BOS), and the prompt is a bidirectional prefix.
        self.paligemma = info.get("vision_format") == "paligemma"
        self.prefix_lm = bool(info.get("prefix_lm"))
        # OpenVLA (Prismatic layout): no placeholder token, one image right after BOS.
        self.openvla = info.get("vision_format") == "prismatic"
        self.image_token = openvla_prompt.PLACEHOLDER if self.openvla else None
        if self.image_token_id is not None:
            self.image_token = tokenizer.convert_ids_to_tokens(self.image_token_id)
        self.action_suffix_id = openvla_prompt.empty_token_id(tokenizer) if self.openvla else None
        self.pipeline: ImagePipeline | None = None
        if self.tokens_per_image:
            policy = MediaPolicy(
                max_image_bytes=config.max_image_bytes,
                max_image_pixels=config.max_image_pixels,
                allowed_local_media_path=config.allowed_local_media_path,
                allow_remote=config.allow_remote_media,
            )
            cache_bytes = int(config.mm_pixel_cache_mb * 1024 * 1024)
            cache = PixelCache(cache_bytes) if cache_bytes > 0 else None
            preprocess = load_preprocessor(path, config.image_backend)
            self.pipeline = ImagePipeline(policy, preprocess, cache)
        self.actions = load_action_tokenizer(path, tokenizer)
        self.fast: FastActionTokenizer | None = None
        self.fast_prompt: Pi0FastPrompt | None = None
        # pi0 / pi0.5: the chunk comes from denoising, not from tokens.
        self.flow = self.actions if isinstance(self.actions, FlowActionPolicy) else None
        if isinstance(self.actions, FastActionTokenizer):
            self.fast = self.actions
            self.fast_prompt = Pi0FastPrompt.create(tokenizer, config.pi0_prompt_convention)
        self.executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="vla-mm")

    @property
    def policy_spec(self) -> LeRobotPolicySpec | None:
        """A pi-family policy's cameras, state and chunk (None for other checkpoints)."""
        policy = self.fast or self.flow
        return None if policy is None else policy.spec

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "num_image_tokens": self.tokens_per_image,
            "image_token": self.image_token,  # the placeholder a prompt writes per image
        }
        if self.pipeline is not None:
            out["preprocess_digest"] = self.pipeline.preprocess_digest.hex()
            if self.pipeline.cache is not None:
                out["pixel_cache"] = self.pipeline.cache.stats()
        policy = self.fast or self.flow
        if policy is not None:
            out["actions"] = policy.describe()
        elif self.actions is not None:
            out["actions"] = {
                "action_dim": self.actions.action_dim,
                "n_bins": self.actions.n_bins,
                "bin_token_ids": [self.actions.first, self.actions.end - 1],
                "unnorm_keys": self.actions.unnorm_keys(),
            }
        return out

    async def expand(
        self, item: GenerateItem, ids: list[int], field: str
    ) -> tuple[list[int], list[MMItem]]:
        """`ids` with image placeholders expanded, and the images that go with them."""
        if not item.images:
            if item.mm_hashes:
                raise RequestError("has entries for 0 images (one hash per image)", "mm_hashes")
            # A placeholder without an image is an ordinary token, as SGLang and transformers'
            # LLaVA read it: random-token benchmarks (bench_serving's random-ids) produce some.
            return ids, []
        hashes = item.mm_hashes
        if hashes is not None and not (
            isinstance(hashes, str)
            or (isinstance(hashes, list) and all(isinstance(h, str) for h in hashes))
        ):
            raise RequestError(
                "must be a hex string or a list of hex strings, one per image", "mm_hashes"
            )
        if self.pipeline is None:
            raise RequestError("this model takes no images", "image_data")
        if self.openvla and len(item.images) > 1:
            raise RequestError(
                f"{len(item.images)} images; an OpenVLA checkpoint takes one image per prompt",
                "image_data",
            )
        if len(item.images) > self.max_images:
            raise RequestError(
                f"{len(item.images)} images; the server accepts at most {self.max_images} per "
                "request (--max-images-per-request)",
                "image_data",
            )
        loop = asyncio.get_running_loop()
        try:
            images = await loop.run_in_executor(
                self.executor, self.pipeline.process, item.images, item.mm_hashes
            )
        except ImageInputError as e:
            where = e.field if e.index is None else f"{e.field}[{e.index}]"
            raise RequestError(str(e), where) from None
        insert_at = 1 if ids and ids[0] == self.bos_token_id and not self.paligemma else 0
        try:
            expanded, spans = expand_image_placeholders(
                ids,
                self.image_token_id,
                [im.hash128 for im in images],
                self.tokens_per_image,
                self.vocab_size,
                insert_at,
            )
        except PlaceholderError as e:
            raise RequestError(str(e), field) from None
        items = [
            MMItem(
                format_mm_hash(sp.hash128), sp.offset, sp.length, Tensor.from_numpy(im.pixel_values)
            )
            for sp, im in zip(spans, images, strict=True)
        ]
        return expanded, items

    def prompt_text(self, text: str) -> str:
        """The text to tokenize for a prompt (OpenVLA: its leading placeholder dropped)."""
        return openvla_prompt.drop_placeholder(text) if self.openvla else text

    def action_prompt_ids(self, ids: list[int]) -> list[int]:
        """An action request's prompt: OpenVLA's ends with the empty token, as predict_action's;
        pi0-FAST's with its convention's tail (`Pi0FastPrompt.action_tail`)."""
        if self.fast_prompt is not None:
            return [*ids, *self.fast_prompt.action_tail()]
        suffix = self.action_suffix_id
        if suffix is None or (ids and ids[-1] == suffix):
            return ids
        return [*ids, suffix]

    def prefix_layout(self, item: GenerateItem, prompt_len: int) -> tuple[int, int]:
        """(bidirectional prefix length, RoPE shift after it) of a prompt of `prompt_len` tokens:
        a prefix-LM model's whole prompt, but for a pi0-FAST action prompt's causal tail."""
        if not self.prefix_lm:
            return 0, 0
        if item.num_actions and self.fast_prompt is not None:
            return prompt_len - self.fast_prompt.causal_tokens, self.fast_prompt.position_shift
        return prompt_len, 0

    def action_state(self, item: GenerateItem) -> Tensor | None:
        """pi0's state-token input of an action request (pi0-FAST and pi0.5 carry the state in
        their prompt, so they take none here)."""
        flow = self.flow
        takes_state = flow is not None and not flow.state_in_prompt and bool(item.num_actions)
        if not takes_state:
            if item.state is not None:
                raise RequestError(
                    "only a pi0 action request takes the state beside its prompt (pi0-FAST's "
                    "and pi0.5's prompts carry it)",
                    "state",
                )
            return None
        assert flow is not None
        return Tensor.from_numpy(flow.state_vector(checked_state(flow.spec, item.state)))

    def action_stop_ids(self) -> list[int]:
        """Token ids that end an action request: FAST's `|` (bins end by count)."""
        return list(self.fast.end_ids) if self.fast is not None else []

    def action_tokens(self, item: GenerateItem, prompt_len: int, context_len: int) -> int:
        """New tokens an action request needs (0 for a plain request); raises for bad input."""
        if not item.num_actions:
            if item.unnorm_key is not None:
                raise RequestError("unnorm_key needs num_actions", "num_actions")
            return 0
        if self.actions is None:
            raise RequestError("this model has no action tokenizer", "num_actions")
        _check_no_stop(item)
        try:
            self.actions.resolve_unnorm_key(item.unnorm_key)
        except ValueError as e:
            raise RequestError(str(e), "unnorm_key") from None
        if self.fast is not None:
            assert self.fast_prompt is not None
            room = context_len - prompt_len
            return _fast_budget(self.fast, self.fast_prompt, item.num_actions, room)
        if self.flow is not None:
            _check_chunk_share(item.num_actions, self.flow.horizon)
            return 0  # the chunk is denoised over the prompt's KV: no new tokens
        limit = min(MAX_ACTIONS_PER_REQUEST, (context_len - prompt_len) // self.actions.action_dim)
        if not 1 <= item.num_actions <= limit:
            raise RequestError(
                f"must be in [1, {limit}] for this prompt ({self.actions.action_dim} tokens per "
                f"action, context length {context_len})",
                "num_actions",
            )
        return item.num_actions * self.actions.action_dim


def _fast_budget(
    fast: FastActionTokenizer, prompt: Pi0FastPrompt, num_actions: int, room: int
) -> int:
    """A FAST request's token budget: the policy's max_decoding_steps, less the "Action: "
    tokens the prompt already holds (the reference generates them), within the context."""
    _check_chunk_share(num_actions, fast.horizon)
    budget = min(fast.spec.max_decoding_steps - prompt.causal_tokens, room)
    if budget < 1:
        raise RequestError("the prompt leaves no room for action tokens", "num_actions")
    return budget


def _check_chunk_share(num_actions: int, horizon: int) -> None:
    if not 1 <= num_actions <= horizon:
        raise RequestError(f"must be in [1, {horizon}] (the policy's action chunk)", "num_actions")


def _check_no_stop(item: GenerateItem) -> None:
    """An action request ends after exactly num_actions actions: sampling is constrained to the
    bin tokens, so a stop could only cut an action in half (and that half would be dropped)."""
    params = item.sampling_params
    for name in ("stop", "stop_token_ids"):
        if getattr(params, name):
            raise RequestError(
                "cannot be combined with num_actions (an action request ends after num_actions "
                "complete actions)",
                f"sampling_params.{name}",
            )
