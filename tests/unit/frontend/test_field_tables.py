"""The request field tables against the schemas they follow.

The reference lists below were copied by hand from the sources (not generated from the tables),
so a field added to SGLang's or OpenAI's schema, or dropped from a table, fails here:

- SGLang `python/sglang/srt/managers/io_struct.py` `GenerateReqInput`, commit 001067ff;
- SGLang `python/sglang/srt/sampling/sampling_params.py` `SamplingParams`, commit 00c17caf;
- sgl-router `sgl-router/src/protocols/generate.rs` `GenerateRequest` (adds `model` in 0.3.2);
- openai-python `src/openai/types/chat/completion_create_params.py`, commit 04448952, plus
  SGLang `python/sglang/srt/entrypoints/openai/protocol.py` `ChatCompletionRequest`, 004c82e0;
- openai-python `src/openai/types/completion_create_params.py`, commit 08b8179a, plus `seed`
  and `stream_options` (newer API) and SGLang's `CompletionRequest` (same protocol.py).
"""

from __future__ import annotations

import pytest

from vla_server.errors import RequestError
from vla_server.frontend.field_tables import (
    CHAT_COMPLETIONS,
    COMPLETIONS,
    GENERATE,
    SAMPLING_PARAMS,
    FieldTable,
)


def _names(block: str) -> list[str]:
    return block.split()


SGLANG_GENERATE = _names(
    """rid session_id text input_ids input_embeds image_data video_data audio_data
mm_hashes mm_content_hashes use_audio_in_video video_config sampling_params return_logprob
logprob_start_len top_logprobs_num token_ids_logprob return_sampling_mask return_text_in_logprobs
return_flat_raw_top_logprobs return_flat_raw_top_logprobs_b64 stream log_metrics
return_hidden_states return_routed_experts routed_experts_start_len return_indexer_topk
modalities session_params lora_path lora_id custom_logit_processor positional_embed_overrides
bootstrap_host bootstrap_port bootstrap_room bootstrap_pair_key decode_tp_size routed_dp_rank
data_parallel_rank disagg_prefill_dp_rank kv_router_hint routing_key conversation_id
http_worker_ipc background require_reasoning max_thinking_tokens priority extra_key no_logs
custom_labels return_bytes return_entropy return_prompt_token_ids external_trace_header
received_time need_wait_for_mm_inputs num_items_assigned encoder_urls max_dynamic_patch
min_dynamic_patch image_max_dynamic_patch video_max_dynamic_patch images_config
multi_item_delimiter_indices cache_salt"""
)
ROUTER_GENERATE_EXTRA = ["model"]
NODE_GENERATE = _names(
    "unnorm_key num_actions deadline_ms control_period_ms capture_time supersede"
)

SGLANG_SAMPLING = _names(
    """max_new_tokens stop stop_token_ids stop_regex temperature top_p top_k min_p
frequency_penalty presence_penalty repetition_penalty min_new_tokens n json_schema regex ebnf
structural_tag ignore_eos skip_special_tokens spaces_between_special_tokens no_stop_trim
custom_params stream_interval logit_bias sampling_seed stop_strs stop_regex_strs
stop_str_max_len stop_regex_max_len is_normalized"""
)

OPENAI_CHAT = _names(
    """messages model audio frequency_penalty function_call functions logit_bias
logprobs max_completion_tokens max_tokens metadata modalities n parallel_tool_calls prediction
presence_penalty reasoning_effort response_format seed service_tier stop store stream_options
temperature tool_choice tools top_logprobs top_p user web_search_options stream"""
)
SGLANG_CHAT_EXTRA = _names(
    """return_hidden_states return_routed_experts routed_experts_start_len
return_cached_tokens_details return_prompt_token_ids return_token_ids return_meta_info task top_k
min_p min_tokens regex ebnf repetition_penalty stop_token_ids stop_regex no_stop_trim ignore_eos
continue_final_message skip_special_tokens lora_path session_id session_params
separate_reasoning stream_reasoning chat_template_kwargs max_dynamic_patch min_dynamic_patch
use_audio_in_video images_config custom_logit_processor custom_params input_ids rid extra_key
cache_salt ngram_corpus_id priority bootstrap_host bootstrap_port bootstrap_room routed_dp_rank
disagg_prefill_dp_rank data_parallel_rank"""
)

OPENAI_COMPLETIONS = _names(
    """model prompt best_of echo frequency_penalty logit_bias logprobs
max_tokens n presence_penalty stop suffix temperature top_p user stream seed
stream_options"""
)
SGLANG_COMPLETIONS_EXTRA = _names(
    """return_hidden_states return_routed_experts routed_experts_start_len
return_cached_tokens_details return_token_ids top_k min_p min_tokens json_schema regex ebnf
repetition_penalty stop_token_ids stop_regex no_stop_trim ignore_eos skip_special_tokens
lora_path session_id session_params response_format custom_params custom_logit_processor
images_config bootstrap_host bootstrap_port bootstrap_room routed_dp_rank disagg_prefill_dp_rank
data_parallel_rank rid extra_key cache_salt ngram_corpus_id priority custom_labels"""
)

# Values the node must refuse: options that would change the output if honoured.
UNSUPPORTED = [
    (
        GENERATE,
        {
            "lora_path": "adapter",
            "return_hidden_states": True,
            "return_routed_experts": True,
            "video_data": "v.mp4",
            "cache_salt": "s",
            "background": True,
        },
    ),
    (SAMPLING_PARAMS, {"json_schema": "{}", "regex": "a+", "ebnf": "x", "stop_regex": "a"}),
    (
        CHAT_COMPLETIONS,
        {
            "tools": [{"type": "function", "function": {"name": "f"}}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "x"}},
            "tool_choice": "required",
            "lora_path": "adapter",
            "return_hidden_states": True,
            "modalities": ["audio"],
        },
    ),
    (COMPLETIONS, {"echo": True, "suffix": "end", "json_schema": "{}", "lora_path": "a"}),
]

CASES = [
    (GENERATE, SGLANG_GENERATE + ROUTER_GENERATE_EXTRA + NODE_GENERATE),
    (SAMPLING_PARAMS, SGLANG_SAMPLING),
    (CHAT_COMPLETIONS, OPENAI_CHAT + SGLANG_CHAT_EXTRA),
    (COMPLETIONS, OPENAI_COMPLETIONS + SGLANG_COMPLETIONS_EXTRA),
]


@pytest.mark.parametrize(("table", "reference"), CASES)
def test_every_schema_field_is_known(table: FieldTable, reference: list[str]):
    assert set(reference) <= table.known, sorted(set(reference) - table.known)


@pytest.mark.parametrize(("table", "reference"), CASES)
def test_sets_are_disjoint(table: FieldTable, reference: list[str]):
    sets = [table.implemented, table.ignored, frozenset(table.default_only)]
    assert sum(len(s) for s in sets) == len(table.known)


@pytest.mark.parametrize(("table", "reference"), CASES)
def test_null_and_defaults_are_accepted_and_dropped(table: FieldTable, reference: list[str]):
    body = dict.fromkeys(reference)
    for name, allowed in table.default_only.items():
        for value in allowed:
            assert table.implemented_fields({name: value}) == {}
    assert table.implemented_fields(body) == {}


@pytest.mark.parametrize(("table", "values"), UNSUPPORTED)
def test_unsupported_values_are_refused_naming_the_field(table: FieldTable, values: dict):
    for name, value in values.items():
        with pytest.raises(RequestError) as e:
            table.implemented_fields({name: value}, prefix="p")
        assert e.value.field == f"p.{name}"
        assert "not supported" in e.value.message


@pytest.mark.parametrize(("table", "reference"), CASES)
def test_unknown_fields_are_refused_naming_them(table: FieldTable, reference: list[str]):
    with pytest.raises(RequestError) as e:
        table.implemented_fields({"temprature": 0.5})
    assert e.value.field == "temprature" and "unknown field" in e.value.message


def test_bool_is_not_an_int_default():
    with pytest.raises(RequestError):
        GENERATE.implemented_fields({"routed_experts_start_len": False})
    with pytest.raises(RequestError):
        GENERATE.implemented_fields({"return_bytes": 0})


def test_ignored_fields_take_any_value():
    got = GENERATE.implemented_fields({"text": "x", "model": "m", "log_metrics": False})
    assert got == {"text": "x"}
    chat = {"messages": [], "user": "u", "separate_reasoning": False, "store": True}
    assert CHAT_COMPLETIONS.implemented_fields(chat) == {"messages": []}
