"""A test-only SmolVLA, written from the facts note (shared/reference/smolvla.md) and nothing
of `vla_server.policies.smolvla`: plain functions over the checkpoint's tensors by their own
names, the folder's JSON read raw.

Where the served model differs on purpose, this one does the simple thing: every denoising step
recomputes the whole [prefix ; actions] sequence through all layers (LeRobot's training
path), with one dense joint attention per self layer over both streams under the big_vision
mask, masked prefix tokens (text padding, empty cameras) kept in place; cross layers recompute
the expert's projection of the VLM K/V at every step. Same seeded noise, same Euler times.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from transformers import AutoTokenizer

VLM = "vlm_with_expert.vlm.model."
EXPERT = "vlm_with_expert.lm_expert.layers."


@dataclass
class Reference:
    w: dict[str, torch.Tensor]  # bare checkpoint names, float32
    cfg: dict[str, Any]  # config.json
    vlm: dict[str, Any]  # vlm/config.json
    tokenizer: Any
    state_stats: dict[str, torch.Tensor]
    action_stats: dict[str, torch.Tensor]


def load_reference(folder: str | Path) -> Reference:
    folder = Path(folder)
    w = {
        k.removeprefix("model."): v.float()
        for k, v in load_file(folder / "model.safetensors").items()
    }
    cfg = json.loads((folder / "config.json").read_text())
    vlm_dir = folder / cfg["vlm_model_name"]
    stats = load_file(folder / "policy_preprocessor_step_5_normalizer_processor.safetensors")
    post = load_file(folder / "policy_postprocessor_step_0_unnormalizer_processor.safetensors")
    return Reference(
        w,
        cfg,
        json.loads((vlm_dir / "config.json").read_text()),
        AutoTokenizer.from_pretrained(vlm_dir),
        {k.split(".")[-1]: v for k, v in stats.items() if k.startswith("observation.state.")},
        {k.split(".")[-1]: v for k, v in post.items() if k.startswith("action.")},
    )


# --- small pieces -----------------------------------------------------------------------


def lin(ref: Reference, name: str, x: torch.Tensor) -> torch.Tensor:
    return F.linear(x, ref.w[name + ".weight"], ref.w.get(name + ".bias"))


def rms(ref: Reference, name: str, x: torch.Tensor) -> torch.Tensor:
    eps = ref.vlm["text_config"].get("rms_norm_eps", 1e-5)
    return ref.w[name + ".weight"] * (x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps))


def rope(x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """HF-style rotate_half RoPE at base 10000 on x [B, L, H, D] at positions [B, L]."""
    d = x.shape[-1]
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    freqs = pos.float()[..., None] * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)[:, :, None, :]
    rotated = torch.cat((-x[..., d // 2 :], x[..., : d // 2]), dim=-1)
    return x * emb.cos() + rotated * emb.sin()


def attention(q, k, v, mask: torch.Tensor) -> torch.Tensor:
    """q [B, Lq, H, D], k/v [B, Lk, Hk, D], mask [B, Lq, Lk] bool -> [B, Lq, H * D]."""
    rep = q.shape[2] // k.shape[2]
    k = k[:, :, :, None].expand(-1, -1, -1, rep, -1).flatten(2, 3)
    v = v[:, :, :, None].expand(-1, -1, -1, rep, -1).flatten(2, 3)
    scores = torch.matmul(q.transpose(1, 2), k.permute(0, 2, 3, 1)) * q.shape[-1] ** -0.5
    scores = torch.where(mask[:, None], scores, torch.finfo(torch.float32).min)
    out = torch.matmul(torch.softmax(scores, dim=-1), v.transpose(1, 2))
    return out.transpose(1, 2).flatten(2)


def make_att_2d(pad: torch.Tensor, ar: torch.Tensor) -> torch.Tensor:
    cum = torch.cumsum(ar, dim=1)
    return (cum[:, None, :] <= cum[:, :, None]) & (pad[:, None, :] & pad[:, :, None])


# --- prefix -----------------------------------------------------------------------------


def vision(ref: Reference, pixels: torch.Tensor) -> torch.Tensor:
    vc = ref.vlm["vision_config"]
    p, heads, eps = vc["patch_size"], vc["num_attention_heads"], vc.get("layer_norm_eps", 1e-6)
    assert pixels.shape[-1] == vc["image_size"] == pixels.shape[-2]
    pre = VLM + "vision_model."
    x = F.conv2d(pixels, ref.w[pre + "embeddings.patch_embedding.weight"],
                 ref.w[pre + "embeddings.patch_embedding.bias"], stride=p)  # fmt: skip
    x = x.flatten(2).transpose(1, 2) + ref.w[pre + "embeddings.position_embedding.weight"]
    ln = lambda t, n: F.layer_norm(t, t.shape[-1:], ref.w[n + ".weight"], ref.w[n + ".bias"], eps)  # noqa: E731
    for i in range(vc["num_hidden_layers"]):
        lp = f"{pre}encoder.layers.{i}."
        y = ln(x, lp + "layer_norm1")
        q, k, v = (lin(ref, lp + f"self_attn.{n}_proj", y) for n in "qkv")
        split = lambda t: t.view(*t.shape[:2], heads, -1)  # noqa: E731
        full = torch.ones(x.shape[0], x.shape[1], x.shape[1], dtype=torch.bool)
        x = x + lin(ref, lp + "self_attn.out_proj", attention(split(q), split(k), split(v), full))
        y = F.gelu(lin(ref, lp + "mlp.fc1", ln(x, lp + "layer_norm2")), approximate="tanh")
        x = x + lin(ref, lp + "mlp.fc2", y)
    return ln(x, pre + "post_layernorm")


def connector(ref: Reference, x: torch.Tensor) -> torch.Tensor:
    """The note's index map: patch (r, c) -> token (r//s)*(n/s) + c//s, at channel block
    (r%s)*s + c%s."""
    s = ref.vlm["scale_factor"]
    b, length, e = x.shape
    n = int(round(length**0.5))
    out = x.new_zeros(b, length // (s * s), s * s * e)
    for r in range(n):
        for c in range(n):
            block = (r % s) * s + c % s
            out[:, (r // s) * (n // s) + c // s, block * e : (block + 1) * e] = x[:, r * n + c]
    return F.linear(out, ref.w[VLM + "connector.modality_projection.proj.weight"])


def embed_text(ref: Reference, ids: torch.Tensor) -> torch.Tensor:
    return F.embedding(ids, ref.w[VLM + "text_model.embed_tokens.weight"])


def image_segments(ref: Reference, img: torch.Tensor, mask: torch.Tensor) -> list[tuple]:
    """[(embeds [B, n, W], pad [B, n])] for one camera slot, special tokens included."""
    b = img.shape[0]
    tokens = connector(ref, vision(ref, img))
    tokens = tokens * math.sqrt(tokens.shape[-1])
    segs = [(tokens, mask[:, None].expand(b, tokens.shape[1]))]
    if ref.cfg.get("add_image_special_tokens", False):
        ids = ref.tokenizer.convert_tokens_to_ids(["<fake_token_around_image>", "<global-img>"])
        start = embed_text(ref, torch.tensor(ids))[None].expand(b, -1, -1)
        end = embed_text(ref, torch.tensor(ids[:1]))[None].expand(b, -1, -1)
        segs = [
            (start, torch.ones(b, 2, dtype=torch.bool)),
            *segs,
            (end, torch.ones(b, 1, dtype=torch.bool)),
        ]
    return segs


def embed_prefix(ref, images, img_masks, ids, id_mask, state):
    """LeRobot's prefix, masked tokens in place: (embeds, pad, ar)."""
    segs = []
    for img, mask in zip(images, img_masks, strict=True):
        segs += image_segments(ref, img, mask)
    text = embed_text(ref, ids) * math.sqrt(ref.vlm["text_config"]["hidden_size"])
    segs.append((text, id_mask))
    segs.append(
        (lin(ref, "state_proj", state)[:, None], torch.ones(state.shape[0], 1, dtype=torch.bool))
    )
    embeds = torch.cat([s[0] for s in segs], dim=1)
    pad = torch.cat([s[1] for s in segs], dim=1)
    ar = torch.zeros_like(pad, dtype=torch.long)
    ar[:, -1] = 1
    return embeds, pad, ar


# --- the joint forward ------------------------------------------------------------------


def heads(t: torch.Tensor, head_dim: int) -> torch.Tensor:
    return t.view(*t.shape[:2], -1, head_dim)


def finish(ref: Reference, pre: str, h: torch.Tensor, attn_out: torch.Tensor) -> torch.Tensor:
    h = h + lin(ref, pre + "self_attn.o_proj", attn_out)
    y = rms(ref, pre + "post_attention_layernorm", h)
    y = F.silu(lin(ref, pre + "mlp.gate_proj", y)) * lin(ref, pre + "mlp.up_proj", y)
    return h + lin(ref, pre + "mlp.down_proj", y)


def is_self_layer(ref: Reference, i: int) -> bool:
    every = ref.cfg.get("self_attn_every_n_layers", 2)
    return "cross" not in ref.cfg["attention_mode"] or (every > 0 and i % every == 0)


def joint_layer(ref, i, hp, hs, mask, pos):
    """One layer over both streams: (prefix hidden, action hidden) -> both updated."""
    d = ref.vlm["text_config"]["head_dim"]
    vp, ep = f"{VLM}text_model.layers.{i}.", f"{EXPERT}{i}."
    n = hp.shape[1]
    xp, xs = rms(ref, vp + "input_layernorm", hp), rms(ref, ep + "input_layernorm", hs)
    qp, kp, vv = (heads(lin(ref, vp + f"self_attn.{p}_proj", xp), d) for p in "qkv")
    qp, kp = rope(qp, pos[:, :n]), rope(kp, pos[:, :n])
    if is_self_layer(ref, i):
        qs, ks, vs = (heads(lin(ref, ep + f"self_attn.{p}_proj", xs), d) for p in "qkv")
        qs, ks = rope(qs, pos[:, n:]), rope(ks, pos[:, n:])
        out = attention(
            torch.cat((qp, qs), 1), torch.cat((kp, ks), 1), torch.cat((vv, vs), 1), mask
        )
        out_p, out_s = out[:, :n], out[:, n:]
    else:
        out_p = attention(qp, kp, vv, mask[:, :n, :n])
        ke = heads(lin(ref, ep + "self_attn.k_proj", kp.flatten(2)), d)
        ve = heads(lin(ref, ep + "self_attn.v_proj", vv.flatten(2)), d)
        qs = heads(lin(ref, ep + "self_attn.q_proj", xs), d)
        spos = pos[:, n:] - pos[:, n:].min(dim=1, keepdim=True).values
        out_s = attention(rope(qs, spos), ke, ve, mask[:, n:, :n])
    return finish(ref, vp, hp, out_p), finish(ref, ep, hs, out_s)


def time_embedding(t: torch.Tensor, width: int, cfg: dict) -> torch.Tensor:
    fraction = torch.linspace(0.0, 1.0, width // 2, dtype=torch.float64)
    period = cfg["min_period"] * (cfg["max_period"] / cfg["min_period"]) ** fraction
    x = (1.0 / period * 2 * math.pi)[None, :] * t.double()[:, None]
    return torch.cat((x.sin(), x.cos()), dim=1).float()


def velocity(ref, prefix, x_t: torch.Tensor, t: float) -> torch.Tensor:
    """v(x_t, t) with the prefix run again from its embeddings."""
    embeds, pad, ar = prefix
    b, horizon = x_t.shape[:2]
    a = lin(ref, "action_in_proj", x_t)
    temb = time_embedding(torch.full((b,), t, dtype=torch.float32), a.shape[-1], ref.cfg)
    hs = torch.cat((a, temb[:, None].expand_as(a)), dim=-1)
    hs = lin(ref, "action_time_mlp_out", F.silu(lin(ref, "action_time_mlp_in", hs)))
    full_pad = torch.cat((pad, torch.ones(b, horizon, dtype=torch.bool)), 1)
    full_ar = torch.cat((ar, torch.ones(b, horizon, dtype=torch.long)), 1)
    mask, pos = make_att_2d(full_pad, full_ar), torch.cumsum(full_pad.long(), 1) - 1
    hp = embeds
    for i in range(ref.cfg["num_vlm_layers"]):
        hp, hs = joint_layer(ref, i, hp, hs, mask, pos)
    return lin(ref, "action_out_proj", rms(ref, "vlm_with_expert.lm_expert.norm", hs))


# --- processing and sampling ------------------------------------------------------------


def letterbox(img: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Resize keeping the aspect ratio, pasted at the bottom-right of a zero canvas."""
    h, w = img.shape[-2:]
    if (h, w) == (height, width):
        return img
    ratio = max(w / width, h / height)
    nh, nw = int(h / ratio), int(w / ratio)
    small = F.interpolate(img, size=(nh, nw), mode="bilinear", align_corners=False)
    canvas = img.new_zeros(*img.shape[:-2], height, width)
    canvas[..., height - nh :, width - nw :] = small
    return canvas


def prepare(ref, images: Mapping[str, torch.Tensor], state, tasks):
    """Raw batch -> (images, masks, ids, id mask, padded normalized state)."""
    keys = [k for k, f in ref.cfg["input_features"].items() if f["type"] == "VISUAL"]
    keys += [f"observation.images.empty_camera_{i}" for i in range(ref.cfg["empty_cameras"])
             if f"observation.images.empty_camera_{i}" not in keys]  # fmt: skip
    width, height = ref.cfg["resize_imgs_with_padding"]
    imgs = [letterbox(images[k].float(), height, width) * 2 - 1 for k in keys if k in images]
    masks = [torch.ones(imgs[0].shape[0], dtype=torch.bool) for _ in imgs]
    for _ in range(min(len(keys) - len(imgs), ref.cfg["empty_cameras"])):
        imgs.append(-torch.ones_like(imgs[0]))
        masks.append(torch.zeros_like(masks[0]))
    tok = ref.tokenizer(
        [t if t.endswith("\n") else t + "\n" for t in tasks],
        padding=ref.cfg["pad_language_to"],
        max_length=ref.cfg["tokenizer_max_length"],
        truncation=True,
        padding_side="right",
        return_tensors="pt",
    )
    s = ref.state_stats
    state = (state.float() - s["mean"]) / (s["std"] + 1e-8)
    state = F.pad(state, (0, ref.cfg["max_state_dim"] - state.shape[-1]))
    return imgs, masks, tok["input_ids"], tok["attention_mask"].bool(), state


def sample(ref, images, state, tasks, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(normalized chunk [B, H, max_action_dim], robot actions [B, H, action_dim])."""
    prefix = embed_prefix(ref, *prepare(ref, images, state, tasks))
    steps = ref.cfg["num_steps"]
    dt = -1.0 / steps
    x = noise.clone()
    for k in range(steps):
        x = x + dt * velocity(ref, prefix, x, 1.0 + k * dt)
    dim = ref.cfg["output_features"]["action"]["shape"][0]
    a = ref.action_stats
    return x, x[..., :dim] * a["std"] + a["mean"]
