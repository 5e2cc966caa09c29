"""Which request fields each schema accepts, as data: strict where it matters.

Every body (and `/generate`'s `sampling_params`) is checked against its table before it is
decoded into the route's struct. A field of the schema is in one of three sets:

- **implemented**: decoded and acted on (the route's struct has it);
- **ignored**: accepted with any value because no value changes the output (user ids, routing
  and logging hints, `stream_reasoning` without a reasoning parser, ...);
- **default-only**: accepted only at its default (listed) or null, which have no effect; any
  other value is a 400 saying the field is not supported, so a client never believes an option
  took effect when it did not.

A null value of any known field means its default. A field in no set is a 400 naming it (a typo
stays loud). The sets follow SGLang's `GenerateReqInput` / `SamplingParams` and the OpenAI
chat-completions / completions schemas with SGLang's extensions (the test keeps the reference
lists, from the sources, to catch drift).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vla_server.errors import RequestError

_NONE: tuple[Any, ...] = ()  # null only
_FALSE = (False,)
_ZERO = (0,)


@dataclass(frozen=True)
class FieldTable:
    implemented: frozenset[str]
    ignored: frozenset[str]
    default_only: Mapping[str, tuple[Any, ...]]  # the accepted values besides null

    @property
    def known(self) -> frozenset[str]:
        return self.implemented | self.ignored | frozenset(self.default_only)

    def implemented_fields(self, body: Any, prefix: str = "") -> dict[str, Any]:
        """The implemented, non-null fields of `body`; a RequestError names the first field
        that is unknown or set to a value this server does not support."""
        if not isinstance(body, dict):
            raise RequestError("must be a JSON object", prefix or "body")
        out: dict[str, Any] = {}
        for name, value in body.items():
            field = f"{prefix}.{name}" if prefix else name
            if name in self.implemented:
                if value is not None:
                    out[name] = value
            elif name in self.default_only:
                allowed = self.default_only[name]
                if value is not None and not any(_same(value, a) for a in allowed):
                    raise RequestError(_unsupported(name, allowed), field)
            elif name not in self.ignored:
                raise RequestError(f"unknown field `{name}`", field)
        return out


def _same(value: Any, allowed: Any) -> bool:
    # JSON true/false must not pass for 1/0 (or the reverse)
    return type(value) is type(allowed) and value == allowed


def _unsupported(name: str, allowed: tuple[Any, ...]) -> str:
    values = ", ".join(["null", *(repr(a) for a in allowed)])
    return f"`{name}` is not supported by this server (accepted: {values})"


def _table(
    implemented: str, ignored: str, default_only: Mapping[str, tuple[Any, ...]]
) -> FieldTable:
    return FieldTable(frozenset(implemented.split()), frozenset(ignored.split()), default_only)


# Fields no server of this kind can honour without a feature the node lacks (LoRA, hidden
# states, expert routing, PD disaggregation, grammars, custom processors), shared by the tables.
_SGLANG_EXTRAS_UNSUPPORTED: dict[str, tuple[Any, ...]] = {
    "return_hidden_states": _FALSE,
    "return_routed_experts": _FALSE,
    "routed_experts_start_len": _ZERO,
    "lora_path": _NONE,
    "custom_logit_processor": _NONE,
    "custom_params": _NONE,
    "bootstrap_host": _NONE,
    "bootstrap_port": _NONE,
    "bootstrap_room": _NONE,
    "cache_salt": _NONE,  # isolates prefixes: ignoring it would share cache across salts
    "extra_key": _NONE,
    "images_config": _NONE,
}

_GRAMMARS: dict[str, tuple[Any, ...]] = {
    "json_schema": _NONE,
    "regex": _NONE,
    "ebnf": _NONE,
    "stop_regex": _NONE,
}

SAMPLING_PARAMS = _table(
    "max_new_tokens stop stop_token_ids temperature top_p top_k min_p frequency_penalty "
    "presence_penalty repetition_penalty min_new_tokens n ignore_eos skip_special_tokens "
    "spaces_between_special_tokens no_stop_trim logit_bias sampling_seed seed",
    # the node's --stream-interval sets the streaming granularity; the output is the same
    "stream_interval",
    {
        **_GRAMMARS,
        "structural_tag": _NONE,
        "custom_params": _NONE,
        # SGLang's internal fields, set by its own normalisation
        "stop_strs": _NONE,
        "stop_regex_strs": _NONE,
        "stop_str_max_len": _ZERO,
        "stop_regex_max_len": _ZERO,
        "is_normalized": _FALSE,
    },
)

GENERATE = _table(
    "text input_ids input_embeds image_data mm_hashes sampling_params rid return_logprob "
    "logprob_start_len top_logprobs_num return_text_in_logprobs stream priority session_params "
    "session_id unnorm_key num_actions deadline_ms control_period_ms capture_time supersede "
    "relaxed_decoding state prev_chunk inference_delay execution_horizon rtc",
    "model log_metrics no_logs custom_labels conversation_id routing_key received_time "
    "external_trace_header http_worker_ipc data_parallel_rank routed_dp_rank "
    "disagg_prefill_dp_rank kv_router_hint modalities",
    {
        **_SGLANG_EXTRAS_UNSUPPORTED,
        "video_data": _NONE,
        "audio_data": _NONE,
        "mm_content_hashes": _NONE,
        "use_audio_in_video": _FALSE,
        "video_config": _NONE,
        "token_ids_logprob": _NONE,
        "return_sampling_mask": _FALSE,
        "return_flat_raw_top_logprobs": _FALSE,
        "return_flat_raw_top_logprobs_b64": _FALSE,
        "return_indexer_topk": _FALSE,
        "lora_id": _NONE,
        "positional_embed_overrides": _NONE,
        "bootstrap_pair_key": _NONE,
        "decode_tp_size": _NONE,
        "background": _FALSE,
        "require_reasoning": _FALSE,
        "max_thinking_tokens": _NONE,
        "return_bytes": _FALSE,
        "return_entropy": _FALSE,
        "return_prompt_token_ids": _FALSE,
        "need_wait_for_mm_inputs": _NONE,
        "num_items_assigned": _NONE,
        "encoder_urls": _NONE,
        "max_dynamic_patch": _NONE,
        "min_dynamic_patch": _NONE,
        "image_max_dynamic_patch": _NONE,
        "video_max_dynamic_patch": _NONE,
        "multi_item_delimiter_indices": _NONE,
    },
)

# Implemented by both OpenAI routes (OpenAI's and SGLang's sampling fields).
_OPENAI_SAMPLING = (
    "model frequency_penalty logit_bias max_tokens n presence_penalty seed stop stream "
    "stream_options temperature top_p top_k min_p min_tokens repetition_penalty stop_token_ids "
    "no_stop_trim ignore_eos skip_special_tokens spaces_between_special_tokens rid priority "
    "session_id "
)
# Accepted with any value by both: ids, bookkeeping and routing hints.
_OPENAI_IGNORED = (
    "user routed_dp_rank data_parallel_rank disagg_prefill_dp_rank ngram_corpus_id custom_labels "
)
_OPENAI_UNSUPPORTED: dict[str, tuple[Any, ...]] = {
    **_SGLANG_EXTRAS_UNSUPPORTED,
    **_GRAMMARS,
    "response_format": ({"type": "text"},),
    "return_cached_tokens_details": _FALSE,
    "return_token_ids": _FALSE,
    "session_params": _NONE,
}

CHAT_COMPLETIONS = _table(
    _OPENAI_SAMPLING + "messages logprobs top_logprobs max_completion_tokens "
    "continue_final_message chat_template_kwargs",
    _OPENAI_IGNORED + "metadata store service_tier parallel_tool_calls separate_reasoning "
    "stream_reasoning",
    {
        **_OPENAI_UNSUPPORTED,
        "audio": _NONE,
        "function_call": ("none", "auto"),
        "functions": ([],),
        "modalities": (["text"],),
        "prediction": _NONE,
        "reasoning_effort": _NONE,
        "tool_choice": ("none", "auto"),
        "tools": ([],),
        "web_search_options": _NONE,
        "return_prompt_token_ids": _FALSE,
        "return_meta_info": _FALSE,
        "task": _NONE,
        "max_dynamic_patch": _NONE,
        "min_dynamic_patch": _NONE,
        "use_audio_in_video": _FALSE,
        "input_ids": _NONE,
    },
)

COMPLETIONS = _table(
    _OPENAI_SAMPLING + "prompt best_of logprobs",
    _OPENAI_IGNORED,
    {**_OPENAI_UNSUPPORTED, "echo": _FALSE, "suffix": _NONE},
)
