"""The one interface between the engine and a policy family: `PolicyFamily` and its hook types.

A family (one folder under `vla_server/policies/`) knows one kind of checkpoint folder: how to
read its decoder config and tokenizer, which vision encoder and action head it has, how its
images are preprocessed, how an action request's prompt is written and budgeted, what the
scheduler runs for it (`Tokens`: sample constrained tokens; `Denoise`: integrate a chunk), and
how its outputs become actions. Each process builds its family object once (`registry`) and
reaches the family only through these hooks:

* scheduler process: the `ModelParts` half (model/parts.py) and `head_spec`;
* main process: `tokenizer`, `image_preprocessor`, `frontend` (a `PolicyFrontend`, and a
  `GuidedFrontend` when its chunks can be guided by real-time chunking);
* detokenizer: `tokenizer`, `action_decoder` (an `ActionDecoder`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np
import torch

from vla_server.errors import RequestError
from vla_server.io_struct import FinishReason, ModelInfo, Tensor
from vla_server.model.config import ModelConfig
from vla_server.model.denoise import denoise_times
from vla_server.model.parts import ActionHead, ModelParts, VisionEncoder
from vla_server.model.tokenizer import load_tokenizer
from vla_server.model.weight_loader import DecoderLayout
from vla_server.multimodal.preprocessor import ImagePreprocessor

# ---- the scheduler: what an action request runs -------------------------------------------


@dataclass(frozen=True)
class Tokens:
    """Action requests sample tokens, constrained to `mask` (True: allowed id)."""

    mask: torch.Tensor


@dataclass(frozen=True)
class Denoise:
    """Action requests generate no tokens: their chunk [chunk_size, width] is integrated from
    seeded noise over `num_steps` Euler steps, one action-head pass each. `state_token`: the
    head embeds the request's state as a prompt token (`PromptPlan.state_position`,
    `model.parts.StateTokenHead`)."""

    chunk_size: int
    width: int
    num_steps: int
    state_token: bool = False

    @cached_property
    def times(self) -> tuple[float, ...]:
        return tuple(denoise_times(self.num_steps))


HeadSpec = Tokens | Denoise

# ---- the main process: prompts, budgets and checks -----------------------------------------


@dataclass(frozen=True)
class RobotIO:
    """A policy's robot interface: named cameras, the state it reads, its action chunk."""

    cameras: tuple[str, ...]
    state_dim: int
    chunk_size: int


@dataclass(frozen=True)
class ActionQuery:
    """What an action query (`/v1/actions`, the openpi WebSocket, the robot doors) asks."""

    instruction: str
    image_data: Any = None  # one image, a list, or a map by camera name
    state: Any = None  # raw robot state
    relaxed_decoding: bool = False
    return_token_ids: bool = False
    temperature: float = 0.0


@dataclass(frozen=True)
class QueryPrompt:
    """An action query's prompt: its token ids, its images in prompt order, and the raw state
    its plan reads (None when the prompt's text carries the state or the family reads none)."""

    input_ids: list[int]
    images: list[Any]
    state: list[float] | None = None


@dataclass(frozen=True)
class ActionAsk:
    """The action side of a tokenized request, for the family's checks and budget."""

    num_actions: int  # 0: a plain request
    unnorm_key: str | None
    state: list[float] | None


@dataclass(frozen=True)
class PromptPlan:
    """How the scheduler runs a tokenized prompt: its token budget (None: the request's own),
    the ids that end it, its bidirectional prefix and the RoPE shift after it, and the
    normalised state the action head reads: beside the prompt, or (`state_position` set) as
    the prompt's token at that position, embedded by the head (`model.parts.StateTokenHead`).
    The front end writes that position's id from the state's bytes (`state_pad_id`)."""

    max_new_tokens: int | None = None
    stop_token_ids: tuple[int, ...] = ()
    prefix_lm_len: int = 0
    position_shift: int = 0
    state: np.ndarray | None = None
    state_position: int | None = None
    # Actions stream out one per this many generated tokens; 0: the chunk comes whole at the end.
    tokens_per_action: int = 0


class PromptEncoder(Protocol):
    """The main process's tokenizer access (off the event loop; errors name `field`)."""

    def encode(self, text: str, field: str = "text") -> Awaitable[list[int]]: ...

    def chat(self, messages: list[dict[str, Any]], field: str) -> Awaitable[list[int]]:
        """The checkpoint's chat template over `messages`, tokenized."""
        ...


class PolicyFrontend(Protocol):
    """A family's prompt conventions and action-request rules in the main process."""

    image_token: str | None  # the placeholder a prompt writes per image
    image_token_id: int | None
    max_images: int | None  # None: the node's --max-images-per-request
    robot_io: RobotIO | None  # None: no named cameras or state
    action_dim: int | None  # None: the checkpoint has no actions
    default_num_actions: int

    def prompt_text(self, text: str) -> str:
        """The text to tokenize for a prompt written by the caller."""
        ...

    def image_insert_at(self, ids: list[int]) -> int:
        """Where images go in a prompt without placeholders."""
        ...

    def action_prompt_ids(self, ids: list[int]) -> list[int]:
        """An action request's prompt ids with the family's tail."""
        ...

    def plan(self, ask: ActionAsk, prompt_len: int, context_len: int) -> PromptPlan:
        """The scheduler's plan for a prompt of `prompt_len` tokens; RequestError on bad
        input (the field named)."""
        ...

    def query_prompt(
        self, query: ActionQuery, encoder: PromptEncoder
    ) -> Awaitable[QueryPrompt]: ...

    def resolve_unnorm_key(self, unnorm_key: str | None) -> str | None:
        """The statistics key a request uses; RequestError naming `unnorm_key`."""
        ...

    def unnorm_keys(self) -> list[str]: ...

    def action_token_ids(self, output_ids: list[int], start: int, stop: int) -> list[Any]:
        """What a reply's `action_token_ids` shows of the generated ids for actions
        [start, stop)."""
        ...

    def describe(self) -> dict[str, Any]: ...


@runtime_checkable
class GuidedFrontend(Protocol):
    """A front end whose action head denoises a chunk that real-time chunking can guide
    (`model/guidance.py`). A family without this hook takes no `prev_chunk`."""

    def prev_chunk_target(self, prev_chunk: np.ndarray) -> np.ndarray:
        """The robot's previous chunk as it has it (raw units, [n, k] float64, finite) in the
        head's space: normalised with the checkpoint's action statistics through the family's
        own normaliser, zero-padded to the head's width, float32 [n, width]. RequestError
        naming `prev_chunk` when it is wider than the action or longer than the chunk."""
        ...


@runtime_checkable
class StatisticsFrontend(Protocol):
    """A front end whose family normalises the robot state and the actions with the checkpoint's
    statistics. Its hooks let a door speak a client-normalised convention (SGLang's action API:
    normalised state in, normalised actions out) on top of the node's own."""

    def raw_state(self, normalized: np.ndarray) -> np.ndarray:
        """A normalised state [state_dim] back in robot units."""
        ...

    def normalized_actions(self, actions: np.ndarray) -> np.ndarray:
        """Actions in robot units [n, action_dim], normalised as the head produced them."""
        ...

    def normalization_modes(self) -> dict[str, str]:
        """The statistics' modes, e.g. {"state": "MEAN_STD", "actions": "QUANTILES"}."""
        ...


@dataclass(frozen=True)
class PromptLayout:
    """How a plain prompt (`POST /generate` text with images) is written for a family, and
    which cache a repeated frame under another instruction meets: tools that exercise the
    image caches (`python -m vla_server.bench multimodal`) write their requests from it."""

    prompt: str  # with {instruction}
    instructions: tuple[str, str]
    # The images sit before any text in a causal prompt: another instruction still finds
    # every image position in the prefix cache (else only their embeddings are cached).
    images_lead: bool
    cameras: int = 1  # images per request
    extra: dict[str, Any] = field(default_factory=dict)  # more request fields


# ---- the detokenizer: outputs into actions -----------------------------------------------


@dataclass(frozen=True)
class ActionOutput:
    """One request's share of a scheduler output, as an action decoder reads it."""

    rid: str
    new_ids: list[int]
    finished: FinishReason | None
    unnorm_key: str | None
    num_actions: int
    relaxed_decoding: bool
    chunk: Tensor | None  # a denoised chunk, with the request's end


@dataclass
class ActionStep:
    actions: list[list[float]] = field(default_factory=list)  # completed since the last step
    count: int = 0  # actions completed so far
    error: str | None = None


class ActionDecoder(Protocol):
    def step(self, out: ActionOutput) -> ActionStep: ...


# ---- the family --------------------------------------------------------------------------


class PolicyFamily:
    """One kind of checkpoint folder. A family subclasses this and overrides what it has;
    `registry.detect` builds it as `family(folder, config)`."""

    name: ClassVar[str]
    # `config.json`'s `type` (LeRobot) or `model_type` (Hugging Face) values this family reads.
    config_types: ClassVar[tuple[str, ...]]

    def __init__(self, folder: Path, config: dict[str, Any]):
        self.folder = folder
        self.config = config  # config.json, or the config a conversion folder amounts to

    @classmethod
    def describe_config(cls, folder: Path, raw: dict[str, Any]) -> dict[str, Any]:
        """The config this family reads for a folder whose config.json is `raw` (a conversion
        folder's own config described in the family's terms); `raw` itself by default."""
        return raw

    # ---- model (scheduler process): see model/parts.py

    def decoder_config(self) -> ModelConfig:
        raise NotImplementedError

    def decoder_layout(self) -> DecoderLayout:
        return DecoderLayout()

    def vision_encoder(
        self, config: ModelConfig, dtype: torch.dtype, device: torch.device
    ) -> VisionEncoder | None:
        return None

    def action_head(
        self, config: ModelConfig, dtype: torch.dtype, device: torch.device, context_len: int
    ) -> ActionHead | None:
        return None

    def differences(self, other: ModelParts) -> list[str]:
        return []

    def head_spec(self, tokenizer: Any, vocab_size: int) -> HeadSpec | None:
        """What an action request runs in the scheduler (None: no action requests)."""
        return None

    # ---- every process

    def tokenizer(self) -> Any:
        """The checkpoint's Hugging Face tokenizer, loaded the same way in every process."""
        return load_tokenizer(self.folder)

    # ---- main process

    def image_preprocessor(self, backend: str) -> ImagePreprocessor | None:
        return None

    def frontend(self, tokenizer: Any, info: ModelInfo, convention: str) -> PolicyFrontend:
        """`convention`: the prompt convention asked for (--prompt-convention) or "auto"."""
        raise NotImplementedError

    # ---- detokenizer

    def action_decoder(self, tokenizer: Any) -> ActionDecoder | None:
        return None

    # ---- tools: benchmarks and demos

    @classmethod
    def tiny_checkpoints(cls) -> dict[str, Callable[[], Path]]:
        """Tiny random folders of this family, by name: each builder returns the folder,
        built offline into the checkpoint cache on first use."""
        return {}

    def prompt_layout(self) -> PromptLayout | None:
        """How a plain image prompt is written (None: the family's actions are asked only
        through action queries)."""
        return None

    def reference_predict(self) -> Callable[..., Any] | None:
        """The family's own way of running a folder (its reference implementation), for the
        benchmarks' reference column: `fn(folder, requests, threads=n)`, or None."""
        return None


def check_chunk_share(num_actions: int, horizon: int) -> None:
    """A request takes at most the policy's whole chunk."""
    if not 1 <= num_actions <= horizon:
        raise RequestError(f"must be in [1, {horizon}] (the policy's action chunk)", "num_actions")


def first_actions(actions: Sequence[Sequence[float]], count: int) -> ActionStep:
    """A whole chunk's first `count` actions (all of them for 0) as one step."""
    out = [list(a) for a in actions[: count or len(actions)]]
    return ActionStep(out, len(out))
