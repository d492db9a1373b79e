"""Transformer Attribution (Chefer, Gur & Wolf 2021) against a transcription of the authors' code.

The reference below re-states, module by module, the relevance propagation of the authors'
public ViT code (Transformer-Explainability: baselines/ViT/ViT_LRP.py, modules/layers_ours.py,
ViT_explanation_generator.LRP.generate_LRP with method "transformer_attribution"): modules
that remember their inputs in a forward hook and propagate relevance with autograd, the
α-β rule for Linear (α = 1), relevance passed unchanged through LayerNorm, GELU, softmax and
dropout, the z rule for both einsum operands halved afterwards, the rescaled Add, Clone,
IndexSelect for the CLS pooling, and the un-normalised rollout of (I + Ā_l). It is loaded with
the weights of a vitviz ViT and must give the same map as vitviz/explain/attribution.py, which
computes the rules in closed form with no hooks and no autograd.
"""

from __future__ import annotations

import pytest
import torch
from conftest import random_vit
from lrp_reference import (
    RGELU,
    RAdd,
    RClone,
    RConv2d,
    RDropout,
    REinsum,
    RIndexSelect,
    RLayerNorm,
    RLinear,
    RSoftmax,
)
from torch import nn

from vitviz.explain import attention_gradients, attention_relevance, transformer_attribution
from vitviz.explain.attribution import add_rule, linear_rule

# -- the transcription of the authors' relevance propagation -----------------------------------


class RefMlp(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1, self.act, self.fc2 = RLinear(dim, hidden), RGELU(), RLinear(hidden, dim)
        self.drop = RDropout(0.0)

    def forward(self, x):
        return self.drop(self.fc2(self.drop(self.act(self.fc1(x)))))

    def relprop(self, R, alpha):
        R = self.drop.relprop(R, alpha)
        R = self.fc2.relprop(R, alpha)
        R = self.act.relprop(R, alpha)
        return self.fc1.relprop(R, alpha)


class RefAttention(nn.Module):
    def __init__(self, dim, heads, qkv_bias):
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.matmul1 = REinsum("bhid,bhjd->bhij")  # Q·Kᵀ
        self.matmul2 = REinsum("bhij,bhjd->bhid")  # A·V
        self.qkv, self.proj = RLinear(dim, 3 * dim, bias=qkv_bias), RLinear(dim, dim)
        self.attn_drop, self.proj_drop, self.softmax = RDropout(0.0), RDropout(0.0), RSoftmax(-1)

    def forward(self, x):
        b, n, d = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = self.attn_drop(self.softmax(self.matmul1([q, k]) * self.scale))
        self.attn = attn
        attn.register_hook(self._keep_gradient)
        out = self.matmul2([attn, v]).transpose(1, 2).reshape(b, n, d)
        return self.proj_drop(self.proj(out))

    def _keep_gradient(self, grad):
        self.attn_gradients = grad

    def relprop(self, R, alpha):
        R = self.proj.relprop(self.proj_drop.relprop(R, alpha), alpha)
        b, n, d = R.shape
        R = R.reshape(b, n, self.heads, d // self.heads).transpose(1, 2)
        r_attn, r_v = self.matmul2.relprop(R, alpha)
        r_attn, r_v = r_attn / 2, r_v / 2
        self.attn_cam = r_attn
        r_attn = self.softmax.relprop(self.attn_drop.relprop(r_attn, alpha), alpha)
        r_q, r_k = self.matmul1.relprop(r_attn, alpha)
        r_q, r_k = r_q / 2, r_k / 2
        r_qkv = torch.stack([r_q, r_k, r_v]).permute(1, 3, 0, 2, 4).reshape(b, n, 3 * d)
        return self.qkv.relprop(r_qkv, alpha)


class RefBlock(nn.Module):
    def __init__(self, dim, heads, hidden, eps, qkv_bias):
        super().__init__()
        self.norm1, self.norm2 = RLayerNorm(dim, eps=eps), RLayerNorm(dim, eps=eps)
        self.attn, self.mlp = RefAttention(dim, heads, qkv_bias), RefMlp(dim, hidden)
        self.add1, self.add2, self.clone1, self.clone2 = RAdd(), RAdd(), RClone(), RClone()

    def forward(self, x):
        x1, x2 = self.clone1(x, 2)
        x = self.add1([x1, self.attn(self.norm1(x2))])
        x1, x2 = self.clone2(x, 2)
        return self.add2([x1, self.mlp(self.norm2(x2))])

    def relprop(self, R, alpha):
        r1, r2 = self.add2.relprop(R, alpha)
        r2 = self.norm2.relprop(self.mlp.relprop(r2, alpha), alpha)
        R = self.clone2.relprop((r1, r2), alpha)
        r1, r2 = self.add1.relprop(R, alpha)
        r2 = self.norm1.relprop(self.attn.relprop(r2, alpha), alpha)
        return self.clone1.relprop((r1, r2), alpha)


class RefViT(nn.Module):
    """The authors' ViT layout: CLS + patches, learned position table, CLS head."""

    def __init__(self, cfg):
        super().__init__()
        D, p = cfg.dim, cfg.patch_size
        self.patch_embed = nn.Module()
        self.patch_embed.proj = RConv2d(cfg.in_channels, D, kernel_size=p, stride=p)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, D))
        self.pos_embed = nn.Parameter(torch.zeros(1, 1 + cfg.num_patches, D))
        hidden = cfg.hidden_dim
        self.blocks = nn.ModuleList(
            RefBlock(D, cfg.heads, hidden, cfg.norm_eps, cfg.qkv_bias) for _ in range(cfg.depth)
        )
        self.norm = RLayerNorm(D, eps=cfg.norm_eps)
        self.head = RLinear(D, cfg.num_classes)
        self.pool, self.add = RIndexSelect(), RAdd()

    def forward(self, x):
        x = self.patch_embed.proj(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        x = self.add([x, self.pos_embed])
        for block in self.blocks:
            x = block(x)
        x = self.pool(self.norm(x), dim=1, indices=torch.tensor(0, device=x.device))
        return self.head(x.squeeze(1))

    def relprop(self, R, start_layer=0, alpha=1):
        R = self.head.relprop(R, alpha).unsqueeze(1)
        R = self.norm.relprop(self.pool.relprop(R, alpha), alpha)
        for block in reversed(self.blocks):
            R = block.relprop(R, alpha)
        cams = []
        for block in self.blocks:
            grad = block.attn.attn_gradients[0].reshape(-1, *block.attn.attn_gradients.shape[-2:])
            cam = block.attn.attn_cam[0].reshape(-1, *block.attn.attn_cam.shape[-2:])
            cams.append((grad * cam).clamp(min=0).mean(dim=0)[None])
        return authors_rollout(cams, start_layer)[:, 0, 1:]


def authors_rollout(matrices, start_layer):
    """M_L ⋯ M_s with M_l = Ā_l + I, no row normalisation (ViT_LRP.compute_rollout_attention)."""
    n = matrices[0].shape[1]
    eye = torch.eye(n, dtype=matrices[0].dtype).expand(matrices[0].shape[0], n, n)
    matrices = [m + eye for m in matrices]
    joint = matrices[start_layer]
    for m in matrices[start_layer + 1 :]:
        joint = m.bmm(joint)
    return joint


def authors_generate_lrp(ref, x, index=None, start_layer=0):
    """generate_LRP(method="transformer_attribution"), then min-max scaled as in their demos."""
    output = ref(x)
    if index is None:
        index = int(output.argmax(dim=-1))
    one_hot = torch.zeros(1, output.shape[-1], dtype=output.dtype)
    one_hot[0, index] = 1
    ref.zero_grad()
    (one_hot * output).sum().backward(retain_graph=True)
    cam = ref.relprop(one_hot, start_layer=start_layer, alpha=1)[0].detach()
    return (cam - cam.min()) / (cam.max() - cam.min())


def reference_for(model):
    ref = RefViT(model.config).to(next(model.parameters()).dtype)
    ref.load_state_dict(model.state_dict(), strict=True)
    return ref.eval()


# -- tests -----------------------------------------------------------------------------------------


def image(cfg, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(1, 3, *cfg.image_size, generator=g).to(dtype)


CASES = [
    dict(seed=0),
    dict(seed=1, image_size=(24, 40)),  # a 3 × 5 grid
    dict(seed=2, depth=3, heads=4, qkv_bias=False),
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("start_layer", [0, 1])
def test_map_equals_the_authors_propagation_float32(case, start_layer):
    model = random_vit(**case)
    x = image(model.config, case["seed"])
    ref = reference_for(model)
    assert torch.allclose(ref(x), model(x), atol=1e-4)  # the same network
    theirs = authors_generate_lrp(ref, x, start_layer=start_layer)
    ours = transformer_attribution(model, x, start_layer=start_layer)[0].flatten()
    assert ours.dtype == torch.float32
    assert (ours - theirs).abs().max() < 1e-3
    assert theirs.std() > 0.05  # a map with structure, not a constant one


@pytest.mark.parametrize("target", [None, 3])
def test_every_layer_relevance_equals_the_authors_float64(target):
    model = random_vit(seed=4, depth=3, image_size=(24, 40)).double()
    x = image(model.config, 4, torch.float64)
    ref = reference_for(model)
    theirs = authors_generate_lrp(ref, x, index=target)
    res = attention_relevance(model, x, target)
    for block, r_a, g in zip(ref.blocks, res.relevances, res.gradients, strict=True):
        assert torch.allclose(r_a, block.attn.attn_cam.detach(), rtol=1e-9, atol=1e-12)
        assert torch.allclose(g, block.attn.attn_gradients, rtol=1e-9, atol=1e-12)
        assert r_a.abs().max() > 1e-4
    ours = transformer_attribution(model, x, target)[0].flatten()
    assert torch.allclose(ours, theirs, atol=1e-9)


def test_add_rule_rescales_to_the_inputs_shares():
    g = torch.Generator().manual_seed(5)
    a, b, r = (torch.randn(2, 5, 8, generator=g, dtype=torch.float64) for _ in range(3))
    ra, rb = add_rule(a, b, r)
    for i in range(2):  # per image: the two parts hold ΣR, in the ratio |Σ(a·S)| : |Σ(b·S)|
        assert torch.allclose(ra[i].sum() + rb[i].sum(), r[i].sum())
        s = r[i] / (a[i] + b[i])
        za, zb = (a[i] * s).sum().abs(), (b[i] * s).sum().abs()
        assert torch.allclose(ra[i].sum().abs() / rb[i].sum().abs(), za / zb)
    assert not torch.allclose(ra, a * r / (a + b))  # not the plain z rule


def test_linear_rule_conserves_without_bias():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 6, generator=g, dtype=torch.float64)
    w = torch.randn(3, 6, generator=g, dtype=torch.float64)
    r = torch.rand(4, 3, generator=g, dtype=torch.float64)
    r_in = linear_rule(x, w, r)
    assert r_in.shape == x.shape
    # the relevance of each output with positive contributions is handed down whole
    z = x.clamp(min=0) @ w.clamp(min=0).T + x.clamp(max=0) @ w.clamp(max=0).T  # (4, 3) ≥ 0
    assert (z == 0).any() and (z > 0).any()
    assert torch.allclose(r_in.sum(dim=1), (r * (z > 0)).sum(dim=1))


def test_gradients_are_the_attention_gradients_of_each_layer():
    model = random_vit(seed=6, depth=3, num_register_tokens=2).double()
    x = image(model.config, 6, torch.float64)
    res = attention_relevance(model, x, 2)
    ag = attention_gradients(model, x, 2)
    assert torch.allclose(res.logits, ag.logits, atol=1e-10)
    for mine, theirs in zip(res.gradients, ag.gradients, strict=True):
        assert torch.allclose(mine, theirs, rtol=1e-9, atol=1e-12)


def test_a_batch_equals_its_images_one_by_one():
    model = random_vit(seed=7, num_register_tokens=1)
    g = torch.Generator().manual_seed(7)
    x = torch.randn(3, 3, 32, 32, generator=g)
    both = transformer_attribution(model, x, torch.tensor([0, 4, 2]))
    for i, c in enumerate([0, 4, 2]):
        one = transformer_attribution(model, x[i : i + 1], c)[0]
        assert torch.allclose(both[i], one, atol=1e-5)


@pytest.mark.parametrize(
    "options",
    [
        dict(layer_scale_init=0.5),
        dict(num_register_tokens=2),
        dict(global_pool="avg", fc_norm=True),
        dict(global_pool="avg", class_token=False),
        dict(global_pool="token_avg"),
        dict(global_pool="token_avg", num_register_tokens=2),
        dict(distill_token=True),
        dict(norm_first=False),
        dict(head_hidden_dim=16),
    ],
)
def test_other_layouts_give_a_scaled_map(options):
    model = random_vit(seed=8, image_size=(24, 40), **options)
    x = image(model.config, 8)
    res = attention_relevance(model, x)
    assert torch.allclose(res.logits, model(x), atol=1e-4)  # the traced forward is the model's
    out = transformer_attribution(model, x)
    assert out.shape == (1, 3, 5)
    assert torch.isfinite(out).all()
    assert float(out.min()) == 0.0 and abs(float(out.max()) - 1.0) < 1e-6


def test_layer_scale_of_one_changes_nothing():
    """LayerScale passes relevance unchanged: γ = 1 gives the map of the same model without it."""
    plain = random_vit(seed=9)
    scaled = random_vit(seed=9, layer_scale_init=1.0)
    scaled.load_state_dict({**scaled.state_dict(), **plain.state_dict()})
    for block in scaled.blocks:
        block.ls1.gamma.data.fill_(1.0)
        block.ls2.gamma.data.fill_(1.0)
    x = image(plain.config, 9)
    assert torch.allclose(plain(x), scaled(x), atol=1e-6)
    assert torch.allclose(
        transformer_attribution(plain, x), transformer_attribution(scaled, x), atol=1e-6
    )


def test_refusals():
    model = random_vit(num_classes=0)
    x = image(model.config, 0)
    with pytest.raises(ValueError, match="no classification head"):
        attention_relevance(model, x)
    model = random_vit()
    with pytest.raises(ValueError, match="out of range"):
        attention_relevance(model, x, 7)
    model.train()
    with pytest.raises(ValueError, match="eval mode"):
        attention_relevance(model, x)


@pytest.mark.parametrize("pool", ["token", "avg", "token_avg"])
def test_the_pooling_rule_hands_the_heads_relevance_to_the_tokens_it_pooled(pool):
    """Float64, from the definitions: the head's linear rule gives the pooled features their
    relevance; the pooling's z rule hands each feature's share, whole, to the tokens it came
    from (token: CLS; avg: the patches; token_avg: the first D features to CLS, the last D to
    the patches)."""
    from vitviz.explain.attribution import _forward, _head_relprop, linear_rule

    model = random_vit(seed=10, image_size=(24, 40), global_pool=pool).double()
    x = image(model.config, 10, torch.float64)
    trace = _forward(model, x)
    target = int(trace.logits[0].argmax())
    r_logits = torch.zeros_like(trace.logits)
    r_logits[0, target] = 1.0
    r_pooled = linear_rule(trace.head_in, model.head.weight, r_logits)[0]
    r_tokens = _head_relprop(model, trace, r_logits)[0][0].detach()  # (tokens, probe)
    D, prefix = r_tokens.shape[-1], model.num_prefix_tokens
    to_cls = {"token": r_pooled, "avg": r_pooled[:0], "token_avg": r_pooled[:D]}[pool]
    to_patches = {"token": r_pooled[:0], "avg": r_pooled, "token_avg": r_pooled[D:]}[pool]
    assert torch.allclose(r_tokens[0].sum(), to_cls.sum(), rtol=1e-9, atol=1e-12)
    assert torch.allclose(r_tokens[prefix:].sum(), to_patches.sum(), rtol=1e-9, atol=1e-12)
    assert r_pooled.abs().sum() > 1e-3
