"""The one ViT (DESIGN §3), checked against an independent float64 forward from its weights."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from vitviz.blocks import VARIANT_NAMES, VisionTransformer, ViTConfig, create_model, vit_config
from vitviz.blocks.layers import LayerScale

BASE = dict(image_size=32, patch_size=8, num_classes=7, dim=32, depth=2, heads=4)

CONFIGS = {
    "tutorial": vit_config("cifar10-tutorial"),
    "tutorial-sincos": vit_config("cifar10-tutorial-sincos"),
    "distill": ViTConfig(**BASE, distill_token=True),
    "registers": ViTConfig(**BASE, num_register_tokens=3),
    "registers-no-embed-class": ViTConfig(**BASE, num_register_tokens=2, no_embed_class=True),
    "layerscale": ViTConfig(**BASE, layer_scale_init=0.1),
    "avg-fc-norm": ViTConfig(**BASE, global_pool="avg", fc_norm=True),
    "pre-norm": ViTConfig(**BASE, pre_norm=True),
    "sincos": ViTConfig(**BASE, pos_embed="sincos"),
    "sincos2d": ViTConfig(**BASE, pos_embed="sincos2d"),
    "no-cls-avg": ViTConfig(**BASE, class_token=False, global_pool="avg"),
    "head-hidden": ViTConfig(**BASE, head_hidden_dim=16),
    "no-qkv-bias-gelu-tanh": ViTConfig(**BASE, qkv_bias=False, activation="gelu_tanh"),
    "quick-gelu-mlp48-nopos": ViTConfig(
        **BASE, activation="quick_gelu", mlp_hidden_dim=48, pos_embed="none"
    ),
    "relu-eps": ViTConfig(**{**BASE, "depth": 3}, activation="relu", norm_eps=1e-5),
    "nonsquare-trained": ViTConfig(**{**BASE, "image_size": (16, 32)}),
}


def randomize(model: nn.Module, seed: int = 0, scale: float = 0.2) -> nn.Module:
    """Replace every parameter by random values big enough for peaked attention and real logits."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            for name, p in module.named_parameters(recurse=False):
                noise = torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype)
                offset = 0.0
                if isinstance(module, nn.LayerNorm) and name == "weight":
                    offset = 1.0
                if isinstance(module, LayerScale):
                    offset = 0.5
                p.copy_(offset + scale * noise)
    return model.eval()


def make_model(config: ViTConfig, seed: int = 0) -> VisionTransformer:
    torch.manual_seed(seed)
    return randomize(VisionTransformer(config), seed)


def images(b: int, h: int, w: int, seed: int = 0, c: int = 3) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 + seed)
    return torch.randn(b, c, h, w, generator=g)


# -- an independent forward, written from the weights in float64 ---------------------------------


def sincos_1d_loop(n: int, dim: int) -> torch.Tensor:
    pe = torch.zeros(n, dim, dtype=torch.float64)
    for p in range(n):
        for i in range(0, dim, 2):
            angle = p / 10000.0 ** (i / dim)
            pe[p, i] = math.sin(angle)
            if i + 1 < dim:
                pe[p, i + 1] = math.cos(angle)
    return pe


def sincos_2d_loop(gh: int, gw: int, dim: int) -> torch.Tensor:
    quarter = dim // 4
    pe = torch.zeros(gh * gw, dim, dtype=torch.float64)
    for r in range(gh):
        for c in range(gw):
            t = r * gw + c
            for k in range(quarter):
                omega = 1.0 / 10000.0 ** (k / quarter)
                pe[t, k] = math.sin(r * omega)
                pe[t, quarter + k] = math.cos(r * omega)
                pe[t, 2 * quarter + k] = math.sin(c * omega)
                pe[t, 3 * quarter + k] = math.cos(c * omega)
    return pe


def bicubic_table(table: torch.Tensor, old: tuple[int, int], new: tuple[int, int]) -> torch.Tensor:
    """(P0, D) patch position table -> (P, D), bicubic over the grid, align_corners False."""
    if old == new:
        return table
    D = table.shape[-1]
    t = table.reshape(1, old[0], old[1], D).permute(0, 3, 1, 2)
    t = F.interpolate(t, size=new, mode="bicubic", align_corners=False)
    return t.permute(0, 2, 3, 1).reshape(new[0] * new[1], D)


def activation(name: str, x: torch.Tensor) -> torch.Tensor:
    if name == "gelu":
        return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))
    if name == "gelu_tanh":
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    if name == "quick_gelu":
        return x * torch.sigmoid(1.702 * x)
    assert name == "relu"
    return x.clamp_min(0)


def layer_norm(x: torch.Tensor, weight, bias, eps: float) -> torch.Tensor:
    mu = x.mean(dim=-1, keepdim=True)
    var = ((x - mu) ** 2).mean(dim=-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * weight + bias


def hand_forward(model: VisionTransformer, x: torch.Tensor):
    """Logits, per-layer attention (B, H, N, N) and block outputs, all float64."""
    cfg = model.config
    W = {k: v.detach().double() for k, v in model.state_dict().items()}
    x = x.double()
    B, C, Himg, Wimg = x.shape
    p, D, H = cfg.patch_size, cfg.dim, cfg.heads
    hd = D // H
    gh, gw = Himg // p, Wimg // p
    # Patch embedding as a matrix product over row-major flattened patches.
    flat = x.reshape(B, C, gh, p, gw, p).permute(0, 2, 4, 1, 3, 5).reshape(B, gh * gw, C * p * p)
    patches = flat @ W["patch_embed.proj.weight"].reshape(D, -1).T + W["patch_embed.proj.bias"]
    prefix = []
    if cfg.class_token:
        prefix.append(W["cls_token"].expand(B, 1, D))
    if cfg.distill_token:
        prefix.append(W["dist_token"].expand(B, 1, D))
    if cfg.num_register_tokens:
        prefix.append(W["reg_token"].expand(B, cfg.num_register_tokens, D))
    npre = cfg.num_prefix_tokens
    if cfg.pos_embed == "learned":
        table = W["pos_embed"][0]
        start = 0 if cfg.no_embed_class else npre
        patches = patches + bicubic_table(table[start:], cfg.grid_size, (gh, gw))
        if prefix and not cfg.no_embed_class:
            prefix = [torch.cat(prefix, dim=1) + table[:npre]]
    if cfg.pos_embed == "sincos2d":
        patches = patches + sincos_2d_loop(gh, gw, D)
    tokens = torch.cat([*prefix, patches], dim=1)
    if cfg.pos_embed == "sincos":
        tokens = tokens + sincos_1d_loop(tokens.shape[1], D)
    if cfg.pre_norm:
        tokens = layer_norm(tokens, W["norm_pre.weight"], W["norm_pre.bias"], cfg.norm_eps)
    attentions, hidden = [], []
    for i in range(cfg.depth):
        b = f"blocks.{i}."
        h = layer_norm(tokens, W[b + "norm1.weight"], W[b + "norm1.bias"], cfg.norm_eps)
        wqkv = W[b + "attn.qkv.weight"]
        bqkv = W.get(b + "attn.qkv.bias", torch.zeros(3 * D, dtype=torch.float64))
        q = h @ wqkv[:D].T + bqkv[:D]
        k = h @ wqkv[D : 2 * D].T + bqkv[D : 2 * D]
        v = h @ wqkv[2 * D :].T + bqkv[2 * D :]
        heads_out, heads_attn = [], []
        for j in range(H):
            sl = slice(j * hd, (j + 1) * hd)
            scores = q[..., sl] @ k[..., sl].transpose(1, 2) / math.sqrt(hd)
            e = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
            a = e / e.sum(dim=-1, keepdim=True)
            heads_attn.append(a)
            heads_out.append(a @ v[..., sl])
        attentions.append(torch.stack(heads_attn, dim=1))
        y = torch.cat(heads_out, dim=-1) @ W[b + "attn.proj.weight"].T + W[b + "attn.proj.bias"]
        if cfg.layer_scale_init is not None:
            y = y * W[b + "ls1.gamma"]
        tokens = tokens + y
        h = layer_norm(tokens, W[b + "norm2.weight"], W[b + "norm2.bias"], cfg.norm_eps)
        h = activation(cfg.activation, h @ W[b + "mlp.fc1.weight"].T + W[b + "mlp.fc1.bias"])
        y = h @ W[b + "mlp.fc2.weight"].T + W[b + "mlp.fc2.bias"]
        if cfg.layer_scale_init is not None:
            y = y * W[b + "ls2.gamma"]
        tokens = tokens + y
        hidden.append(tokens)
    if not cfg.fc_norm:
        tokens = layer_norm(tokens, W["norm.weight"], W["norm.bias"], cfg.norm_eps)
    pooled = tokens[:, npre:].mean(dim=1) if cfg.global_pool == "avg" else tokens[:, 0]
    if cfg.fc_norm:
        pooled = layer_norm(pooled, W["fc_norm.weight"], W["fc_norm.bias"], cfg.norm_eps)
    if cfg.head_hidden_dim:
        pooled = torch.tanh(pooled @ W["pre_logits.0.weight"].T + W["pre_logits.0.bias"])
    logits = pooled @ W["head.weight"].T + W["head.bias"]
    if cfg.distill_token:
        dist = tokens[:, 1] @ W["head_dist.weight"].T + W["head_dist.bias"]
        logits = (logits + dist) / 2
    return logits, attentions, hidden


# -- capture path vs fused path vs the hand forward -------------------------------------------


@pytest.mark.parametrize("shape", [(32, 32), (32, 48)], ids=["square", "nonsquare"])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_capture_path_matches_fused_path_and_hand_forward(name, shape):
    cfg = CONFIGS[name]
    model = make_model(cfg, seed=len(name))
    x = images(3, *shape, seed=len(name))
    with torch.no_grad():
        fused = model(x)
        out = model.forward_explained(x, capture_attention=True, hidden_states=True)
    gh, gw = shape[0] // cfg.patch_size, shape[1] // cfg.patch_size
    N = cfg.num_prefix_tokens + gh * gw
    assert out.grid == (gh, gw)
    assert out.num_prefix_tokens == cfg.num_prefix_tokens
    assert fused.shape == (3, cfg.num_classes)
    assert torch.allclose(out.logits, fused, atol=1e-5, rtol=0)
    # The logits are not trivially tiny: the comparison means something.
    assert fused.abs().max() > 0.1

    ref_logits, ref_attn, ref_hidden = hand_forward(model, x)
    assert torch.allclose(out.logits.double(), ref_logits, atol=1e-4, rtol=1e-4)
    assert len(out.attentions) == cfg.depth
    for got, ref in zip(out.attentions, ref_attn, strict=True):
        assert got.shape == (3, cfg.heads, N, N)
        # float32 against float64: a softmax's rounding error is relative to each probability.
        assert torch.allclose(got.double(), ref, atol=1e-6, rtol=5e-5)
        assert torch.allclose(got.sum(dim=-1), torch.ones(3, cfg.heads, N), atol=1e-5)
        assert (got >= 0).all()
    # Attention is far from uniform, so an error in the hand check would show.
    assert ref_attn[-1].amax() > 3.0 / N
    assert len(out.hidden_states) == cfg.depth
    for got, ref in zip(out.hidden_states, ref_hidden, strict=True):
        assert got.shape == (3, N, cfg.dim)
        scale = float(ref.abs().max())  # float32 sums: their error follows the tokens' scale
        assert torch.allclose(got.double(), ref, atol=4e-6 * scale, rtol=1e-4)


def test_captured_attention_from_block_parts():
    """Per block: norm1 output -> qkv Linear weights -> softmax(QKᵀ/√d), from the block input."""
    cfg = ViTConfig(**{**BASE, "depth": 3})
    model = make_model(cfg, seed=5)
    x = images(2, 32, 48, seed=5)
    with torch.no_grad():
        out = model.forward_explained(x, hidden_states=True)
        inputs = [model.embed(x)[0], *out.hidden_states[:-1]]
        for block, block_in, got in zip(model.blocks, inputs, out.attentions, strict=True):
            h = block.norm1(block_in).double()
            qkv = h @ block.attn.qkv.weight.double().T + block.attn.qkv.bias.double()
            D, H = cfg.dim, cfg.heads
            hd = D // H
            for j in range(H):
                q = qkv[..., j * hd : (j + 1) * hd]
                k = qkv[..., D + j * hd : D + (j + 1) * hd]
                a = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(hd), dim=-1)
                assert torch.allclose(got[:, j].double(), a, atol=1e-5, rtol=0)


def test_no_capture_gives_no_attention_and_same_logits():
    model = make_model(CONFIGS["registers"])
    x = images(2, 32, 40)
    with torch.no_grad():
        out = model.forward_explained(x, capture_attention=False)
        ref = model.forward_explained(x, capture_attention=True)
    assert out.attentions == []
    assert out.hidden_states == []
    assert torch.allclose(out.logits, ref.logits, atol=1e-5, rtol=0)


def test_float64_paths_agree_tightly():
    model = make_model(CONFIGS["layerscale"]).double()
    x = images(3, 32, 48).double()
    with torch.no_grad():
        out = model.forward_explained(x)
        fused = model(x)
    ref_logits, ref_attn, _ = hand_forward(model, x)
    assert torch.allclose(out.logits, fused, atol=1e-10, rtol=0)
    # Interpolation of the learned table may run in float32, hence a float32-sized tolerance.
    assert torch.allclose(out.logits, ref_logits, atol=1e-5, rtol=0)
    for got, ref in zip(out.attentions, ref_attn, strict=True):
        assert torch.allclose(got, ref, atol=1e-5, rtol=0)


# -- named variants ---------------------------------------------------------------------------


def test_named_variant_configs():
    expected = {
        "vit-tiny": (192, 12, 3),
        "vit-small": (384, 12, 6),
        "vit-base": (768, 12, 12),
        "vit-large": (1024, 24, 16),
    }
    for name, (dim, depth, heads) in expected.items():
        cfg = vit_config(name)
        assert (cfg.dim, cfg.depth, cfg.heads) == (dim, depth, heads)
        assert cfg.patch_size == 16 and cfg.image_size == (224, 224)
        assert cfg.num_patches == 196 and cfg.num_prefix_tokens == 1
    tut = vit_config("cifar10-tutorial")
    assert (tut.image_size, tut.patch_size, tut.num_classes) == ((32, 32), 8, 10)
    assert (tut.dim, tut.depth, tut.heads, tut.num_patches) == (64, 4, 4, 16)
    assert vit_config("cifar10-tutorial-sincos").pos_embed == "sincos"
    assert set(expected) | {"cifar10-tutorial", "cifar10-tutorial-sincos"} <= set(VARIANT_NAMES)
    assert vit_config("vit-base", num_classes=5).num_classes == 5
    with pytest.raises(ValueError, match="unknown ViT variant"):
        vit_config("vit-gigantic")


def test_vit_base_attention_shape():
    torch.manual_seed(0)
    model = create_model("vit-base", depth=1, num_classes=3).eval()
    with torch.no_grad():
        out = model.forward_explained(torch.randn(1, 3, 224, 224))
    assert out.grid == (14, 14)
    assert [tuple(a.shape) for a in out.attentions] == [(1, 12, 197, 197)]
    assert out.logits.shape == (1, 3)


@pytest.mark.parametrize("name", ["cifar10-tutorial", "cifar10-tutorial-sincos"])
def test_tutorial_attention_shape(name):
    torch.manual_seed(0)
    model = create_model(name).eval()
    with torch.no_grad():
        out = model.forward_explained(torch.randn(2, 3, 32, 32))
    assert out.grid == (4, 4)
    assert [tuple(a.shape) for a in out.attentions] == [(2, 4, 17, 17)] * 4
    assert out.logits.shape == (2, 10)


# -- config checks and round trip ---------------------------------------------------------------


def test_config_refuses_dim_not_divisible_by_heads():
    with pytest.raises(ValueError, match=r"dim 30 is not divisible by heads 4"):
        ViTConfig(**{**BASE, "dim": 30})


def test_config_refuses_image_not_divisible_by_patch():
    with pytest.raises(ValueError, match=r"30.*not divisible by patch size 8"):
        ViTConfig(**{**BASE, "image_size": (30, 32)})
    with pytest.raises(ValueError, match=r"not divisible by patch size 8"):
        ViTConfig(**{**BASE, "image_size": 36})


def test_input_not_divisible_by_patch_is_refused():
    model = make_model(ViTConfig(**BASE))
    with pytest.raises(ValueError, match="not divisible"):
        model(images(1, 30, 32))


def test_model_refuses_invalid_config():
    cfg = ViTConfig(**BASE)
    cfg.heads = 5  # made invalid after construction
    with pytest.raises(ValueError, match="divisible by heads"):
        VisionTransformer(cfg)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_config_round_trip(name):
    cfg = CONFIGS[name]
    d = cfg.to_dict()
    assert ViTConfig.from_dict(d) == cfg
    assert ViTConfig.from_dict(json.loads(json.dumps(d))) == cfg


def test_config_from_dict_refuses_unknown_field():
    d = ViTConfig(**BASE).to_dict()
    d["depht"] = 3
    with pytest.raises(ValueError, match="depht"):
        ViTConfig.from_dict(d)


# -- batch independence, position embedding, hidden states, dropout -----------------------------


@pytest.mark.parametrize("name", ["distill", "registers", "avg-fc-norm", "sincos"])
def test_batch_independence(name):
    model = make_model(CONFIGS[name], seed=3)
    x = images(3, 32, 48, seed=3)
    with torch.no_grad():
        batch = model.forward_explained(x, hidden_states=True)
        # A batch and one image sum in different orders (matrix kernels block by batch size):
        # tolerances follow the scale of what is compared; probabilities are relative to p.
        for i in range(3):
            alone = model.forward_explained(x[i : i + 1], hidden_states=True)
            scale = float(alone.logits.abs().max())
            assert torch.allclose(batch.logits[i], alone.logits[0], atol=4e-6 * scale, rtol=0)
            for a, b in zip(batch.attentions, alone.attentions, strict=True):
                assert torch.allclose(a[i], b[0], atol=1e-7, rtol=1e-5)
            for a, b in zip(batch.hidden_states, alone.hidden_states, strict=True):
                scale = float(b.abs().max())
                assert torch.allclose(a[i], b[0], atol=2e-6 * scale, rtol=0)
            assert torch.allclose(model(x[i : i + 1])[0], batch.logits[i], atol=1e-5, rtol=0)


def zero_content(model: VisionTransformer) -> VisionTransformer:
    """Patch embedding and prefix tokens zero, so the embedded tokens are the position terms."""
    with torch.no_grad():
        model.patch_embed.proj.weight.zero_()
        model.patch_embed.proj.bias.zero_()
        for t in (model.cls_token, model.dist_token, model.reg_token):
            if t is not None:
                t.zero_()
    return model


def test_learned_position_embedding_trained_size_unchanged():
    cfg = ViTConfig(**BASE, num_register_tokens=1)
    model = zero_content(make_model(cfg))
    with torch.no_grad():
        tokens, grid = model.embed(images(2, 32, 32))
    assert grid == (4, 4)
    assert torch.equal(tokens, model.pos_embed.expand(2, -1, -1))


@pytest.mark.parametrize("no_embed_class", [False, True])
@pytest.mark.parametrize("shape", [(32, 48), (48, 24), (16, 16)])
def test_learned_position_embedding_interpolated_bicubic(shape, no_embed_class):
    cfg = ViTConfig(**BASE, num_register_tokens=1, no_embed_class=no_embed_class)
    model = zero_content(make_model(cfg))
    npre = 2
    with torch.no_grad():
        tokens, grid = model.embed(images(2, *shape))
    gh, gw = shape[0] // 8, shape[1] // 8
    assert grid == (gh, gw)
    table = model.pos_embed.detach()[0]
    start = 0 if no_embed_class else npre
    patch_table = table[start:].reshape(1, 4, 4, cfg.dim).permute(0, 3, 1, 2)
    expected = F.interpolate(patch_table, size=(gh, gw), mode="bicubic", align_corners=False)
    expected = expected.permute(0, 2, 3, 1).reshape(gh * gw, cfg.dim)
    assert tokens.shape == (2, npre + gh * gw, cfg.dim)
    assert torch.allclose(tokens[:, npre:], expected.expand(2, -1, -1), atol=1e-6, rtol=0)
    prefix_expected = torch.zeros(npre, cfg.dim) if no_embed_class else table[:npre]
    assert torch.allclose(tokens[:, :npre], prefix_expected.expand(2, -1, -1), atol=0, rtol=0)


def test_sincos_1d_table_matches_transformer_formula():
    cfg = ViTConfig(**BASE, pos_embed="sincos", distill_token=True)
    model = zero_content(make_model(cfg))
    with torch.no_grad():
        tokens, _ = model.embed(images(1, 32, 48))
    N = 2 + 4 * 6
    ref = sincos_1d_loop(N, cfg.dim)
    assert tokens.shape == (1, N, cfg.dim)
    assert torch.allclose(tokens[0].double(), ref, atol=1e-6, rtol=0)
    assert not hasattr(model, "pos_embed") or model.pos_embed is None


def test_sincos_2d_table_over_the_grid():
    cfg = ViTConfig(**BASE, pos_embed="sincos2d")
    model = zero_content(make_model(cfg))
    with torch.no_grad():
        tokens, _ = model.embed(images(1, 24, 40))
    assert torch.equal(tokens[0, 0], torch.zeros(cfg.dim))
    assert torch.allclose(tokens[0, 1:].double(), sincos_2d_loop(3, 5, cfg.dim), atol=1e-6)


def test_hidden_states_are_block_outputs():
    cfg = ViTConfig(**{**BASE, "depth": 3}, num_register_tokens=2)
    model = make_model(cfg)
    x = images(2, 32, 48)
    with torch.no_grad():
        out = model.forward_explained(x, capture_attention=False, hidden_states=True)
        tokens, _ = model.embed(x)
        for block, h in zip(model.blocks, out.hidden_states, strict=True):
            tokens, _ = block(tokens)
            assert torch.allclose(h, tokens, atol=1e-6, rtol=0)
        logits = model.forward_head(model.norm(out.hidden_states[-1]))
    assert len(out.hidden_states) == 3
    assert all(h.shape == (2, 3 + 24, cfg.dim) for h in out.hidden_states)
    assert torch.allclose(logits, out.logits, atol=1e-6, rtol=0)


def test_dropout_and_drop_path_do_nothing_in_eval_mode():
    rates = dict(drop_rate=0.5, attn_drop_rate=0.5, drop_path_rate=0.5)
    noisy = make_model(ViTConfig(**BASE, **rates, layer_scale_init=0.5))
    clean = VisionTransformer(ViTConfig(**BASE, layer_scale_init=0.5))
    clean.load_state_dict(noisy.state_dict())
    clean.eval()
    x = images(3, 32, 48)
    with torch.no_grad():
        ref = clean.forward_explained(x)
        for _ in range(2):
            assert torch.allclose(noisy(x), clean(x), atol=1e-6, rtol=0)
            got = noisy.forward_explained(x)
            assert torch.allclose(got.logits, ref.logits, atol=1e-6, rtol=0)
            for a, b in zip(got.attentions, ref.attentions, strict=True):
                assert torch.allclose(a, b, atol=1e-7, rtol=0)
        # The rates are real: in training mode the same model is random.
        noisy.train()
        torch.manual_seed(0)
        first = noisy(x)
        second = noisy(x)
        explained = noisy.forward_explained(x).logits
    assert not torch.allclose(first, second, atol=1e-4)
    assert not torch.allclose(explained, ref.logits, atol=1e-4)
