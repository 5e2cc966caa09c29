"""The served-ITL piece that needs no server: the random-weight checkpoint builder."""

from __future__ import annotations

from safetensors import safe_open

from vla_server.bench.itl_checkpoint import SHAPES, build_checkpoint

TINY = SHAPES["tiny"]


def test_one_b_shape_has_about_a_billion_parameters():
    s = SHAPES["1b"]
    head_dim = s.hidden // s.q_heads
    attn = 2 * s.hidden * s.hidden + 2 * s.hidden * s.kv_heads * head_dim
    layer = attn + 3 * s.hidden * s.intermediate + 2 * s.hidden
    total = s.layers * layer + 2 * s.vocab * s.hidden + s.hidden
    assert 0.9e9 < total < 1.2e9


def test_checkpoint_loads_in_transformers_and_counts_its_decode_bytes(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ckpt = build_checkpoint(TINY, tmp_path / "a")
    model = AutoModelForCausalLM.from_pretrained(ckpt.path)
    assert model.config.num_key_value_heads == TINY.kv_heads
    assert not model.config.tie_word_embeddings
    with safe_open(ckpt.path / "model.safetensors", "pt") as f:
        sizes = {k: f.get_tensor(k).nbytes for k in f.keys()}  # noqa: SIM118 - no dict here
    assert ckpt.weight_bytes == sum(sizes.values()) - sizes["model.embed_tokens.weight"]
    tok = AutoTokenizer.from_pretrained(ckpt.path)
    assert len(tok) == TINY.vocab
    # Whatever id a random model emits has text.
    assert tok.convert_ids_to_tokens(list(range(4, TINY.vocab))) == [
        f"t{i}" for i in range(4, TINY.vocab)
    ]


def test_checkpoint_is_reproducible(tmp_path):
    files = [
        (build_checkpoint(TINY, tmp_path / d, seed=s).path / "model.safetensors").read_bytes()
        for d, s in (("a", 0), ("b", 0), ("c", 1))
    ]
    assert files[0] == files[1] and files[0] != files[2]
