"""Config parsing and safetensors loading: layouts, shards, tied weights, errors, weight swaps."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, LlavaForConditionalGeneration

from tests.support.tiny_checkpoints import make_llama, make_llava, make_qwen2, make_tokenizer
from vla_server.model.attention.registry import resolve_backend_name
from vla_server.model.model_runner import ModelRunner
from vla_server.model.weight_loader import (
    WeightLoadError,
    load_tensors_with_prefix,
)
from vla_server.policies.registry import detect

PROMPT = [3, 141, 59, 26, 53, 58, 97, 93, 238, 46, 264, 33]


def runner_for(path, **kwargs) -> ModelRunner:
    kwargs.setdefault("max_total_tokens", 256)
    return ModelRunner(detect(path), max_running_requests=2, progress=False, **kwargs)


def last_logits(runner: ModelRunner, tokens: list[int]) -> torch.Tensor:
    """Prefill `tokens` as one request, free its KV, return the logits after the last token."""
    row = runner.req_to_token_pool.alloc()
    slots = runner.kv_pool.allocator.alloc(len(tokens))
    out = runner.forward(runner.build_forward_batch([row], [0], [tokens], slots))
    runner.kv_pool.allocator.free(slots)
    runner.req_to_token_pool.free(row)
    return out.next_token_logits[0]


@torch.no_grad()
def reference_logits(model, tokens: list[int]) -> torch.Tensor:
    return model(input_ids=torch.tensor([tokens])).logits[0, -1].float()


def test_llama_config_fields():
    config = detect(make_llama()).decoder_config()
    tok = make_tokenizer()
    assert config.architecture == "LlamaForCausalLM"
    assert (config.num_layers, config.num_heads, config.num_kv_heads) == (2, 4, 2)
    assert (config.hidden_size, config.head_dim, config.vocab_size) == (128, 32, len(tok))
    assert config.max_position_embeddings == config.context_len == 512
    assert not config.tie_word_embeddings and not config.qkv_bias and not config.o_bias
    assert config.rope_scaling is None and config.rope_theta == 10000.0
    # config.json has the eos id; generation_config.json a list adding <|im_end|>.
    assert config.eos_token_ids == (tok.eos_token_id, tok.convert_tokens_to_ids("<|im_end|>"))
    assert config.dtype == torch.float32
    assert not detect(make_llama()).has_vision and config.image_token_id is None


def test_qwen2_and_llava_config_fields():
    qwen = detect(make_qwen2()).decoder_config()
    assert qwen.decoder_type == "qwen2" and qwen.qkv_bias and not qwen.o_bias
    assert qwen.tie_word_embeddings and qwen.rope_theta == 1e6
    family = detect(make_llava(text="qwen2"))
    llava = family.decoder_config()
    assert llava.architecture == "LlavaForConditionalGeneration"
    assert llava.decoder_type == "qwen2" and family.has_vision
    assert llava.image_token_id == make_tokenizer().convert_tokens_to_ids("<image>")
    assert family.config["vision_config"]["model_type"] == "clip_vision_model"


def test_explicit_head_dim_and_old_style_rope(tmp_path):
    shutil.copytree(make_llama(), tmp_path, dirs_exist_ok=True)
    raw = json.loads((tmp_path / "config.json").read_text())
    raw.pop("rope_parameters")
    raw.update(head_dim=48, rope_theta=2500.0, rope_scaling={"type": "linear", "factor": 2.0})
    (tmp_path / "config.json").write_text(json.dumps(raw))
    config = detect(tmp_path).decoder_config()
    assert config.head_dim == 48
    assert config.rope_theta == 2500.0
    assert config.rope_scaling == {"rope_type": "linear", "factor": 2.0, "rope_theta": 2500.0}


@pytest.mark.parametrize("make", [make_llama, make_qwen2], ids=["llama-untied", "qwen2-tied-bias"])
def test_sharded_checkpoint_loads(make):
    path = make(max_shard_size="300KB")
    assert (path / "model.safetensors.index.json").exists()
    assert len(list(path.glob("*.safetensors"))) > 2
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    torch.testing.assert_close(
        last_logits(runner_for(path), PROMPT), reference_logits(hf, PROMPT), atol=1e-4, rtol=1e-4
    )


@pytest.mark.parametrize("original_layout", [False, True], ids=["transformers5", "original"])
@pytest.mark.parametrize("text", ["llama", "qwen2"])
def test_llava_decoder_loads_from_both_layouts(text, original_layout):
    path = make_llava(text=text, original_layout=original_layout)
    names = load_file(path / "model.safetensors").keys()
    prefix = "language_model.model." if original_layout else "model.language_model."
    assert any(n.startswith(prefix) for n in names)
    hf = LlavaForConditionalGeneration.from_pretrained(path, dtype=torch.float32).eval()
    torch.testing.assert_close(
        last_logits(runner_for(path), PROMPT), reference_logits(hf, PROMPT), atol=1e-4, rtol=1e-4
    )
    # The vision tower and projector are left for the vision loader, under their own names.
    extra = load_tensors_with_prefix(path, detect(path).decoder_layout().skip)
    reference = hf.state_dict()
    vision = {n: t for n, t in reference.items() if "vision_tower" in n or "projector" in n}
    assert len(extra) == len(vision) > 0
    for name, tensor in extra.items():
        ref_name = name if name.startswith("model.") else "model." + name
        torch.testing.assert_close(tensor, reference[ref_name])


def rewrite_checkpoint(src, dst, edit) -> None:
    shutil.copytree(src, dst, dirs_exist_ok=True)
    tensors = load_file(dst / "model.safetensors")
    edit(tensors)
    save_file(tensors, dst / "model.safetensors", metadata={"format": "pt"})


def test_untied_config_without_lm_head_ties(tmp_path):
    """lm_head absent from the file: the embeddings serve as the output projection."""
    rewrite_checkpoint(make_llama(), tmp_path, lambda t: t.pop("lm_head.weight"))
    runner = runner_for(tmp_path)
    torch.testing.assert_close(runner.model.lm_head.weight, runner.model.embed_tokens.weight)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t.pop("model.layers.1.mlp.up_proj.weight"), "1 missing tensor"),
        (lambda t: t.update({"model.layers.7.mlp.up_proj.weight": torch.zeros(1)}), "unexpected"),
        (lambda t: t.update({"something.else": torch.zeros(1)}), "something.else"),
        (
            lambda t: t.update({"model.norm.weight": torch.ones(64)}),
            r"misshapen.*model\.norm\.weight: checkpoint \[64\], model \[128\]",
        ),
    ],
    ids=["missing", "unexpected-layer", "unknown-name", "shape"],
)
def test_bad_checkpoint_is_refused_and_weights_kept(tmp_path, edit, message):
    good = make_llama()
    runner = runner_for(good)
    before = last_logits(runner, PROMPT)
    rewrite_checkpoint(good, tmp_path, edit)
    with pytest.raises(WeightLoadError, match=message):
        runner.update_weights(detect(tmp_path))
    torch.testing.assert_close(last_logits(runner, PROMPT), before, atol=0, rtol=0)
    with pytest.raises(WeightLoadError, match=message):
        runner_for(tmp_path)


def test_update_weights_from_disk():
    runner = runner_for(make_llama())
    other = make_llama(seed=5)
    runner.update_weights(detect(other))
    hf = AutoModelForCausalLM.from_pretrained(other, dtype=torch.float32).eval()
    torch.testing.assert_close(
        last_logits(runner, PROMPT), reference_logits(hf, PROMPT), atol=1e-4, rtol=1e-4
    )
    assert runner.model_path == other
    with pytest.raises(WeightLoadError, match="different architecture.*decoder_type"):
        runner.update_weights(detect(make_qwen2()))
    with pytest.raises(WeightLoadError, match="num_layers: 2 != 3"):
        runner.update_weights(detect(make_llama(num_layers=3)))


def test_bfloat16_runner_close_to_float32_reference():
    path = make_llama()
    runner = runner_for(path, dtype="bfloat16")
    assert runner.kv_pool.k_buffer[0].dtype == torch.bfloat16
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    ours, ref = last_logits(runner, PROMPT), reference_logits(hf, PROMPT)
    assert ours.dtype == torch.float32
    # bf16 keeps ~3 significant digits; the ranking of clearly separated logits survives.
    assert (ours - ref).abs().max() < 0.25
    assert ours.argmax() == ref.argmax()


def test_kv_pool_sizing_and_backend_names():
    path = make_llama()
    runner = runner_for(path, max_total_tokens=None, mem_fraction=0.5, context_len=64)
    # Free memory is plentiful for this model: the pool is capped at every request's full context.
    assert runner.max_total_tokens == 64 * 2
    assert runner.req_to_token_pool.req_to_token.shape[1] == 64
    assert resolve_backend_name("auto", torch.device("cpu")) == "torch"
    assert resolve_backend_name("auto", torch.device("cuda")) == "triton"  # picked, not run
    assert resolve_backend_name("triton", torch.device("cpu")) == "triton"  # the interpreter
    with pytest.raises(ValueError, match="unknown attention backend 'nope'"):
        resolve_backend_name("nope", torch.device("cpu"))


def test_build_forward_batch_rejects_bad_batches():
    runner = runner_for(make_llama(), context_len=16)
    slots = torch.arange(1, 4)
    with pytest.raises(ValueError, match="exceeds context_len 16"):
        runner.build_forward_batch([0], [14], [[1, 2, 3]], slots)
    with pytest.raises(ValueError, match="at least one new token"):
        runner.build_forward_batch([0, 1], [0, 0], [[1, 2, 3], []], slots)
    with pytest.raises(ValueError, match="2 slots for 3 tokens"):
        runner.build_forward_batch([0], [0], [[1, 2, 3]], slots[:2])
