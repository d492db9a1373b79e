"""Transformer Attribution on the CaiT kind against a reference written from the rules.

The reference below is a CaiT built, in the style of the authors' code (``lrp_reference``), from
modules that remember their inputs and propagate relevance with autograd: the α-β rule for every
Linear (α = 1), the talking heads' ``proj_l`` and ``proj_w`` included (Linears over the head
axis), relevance passed unchanged through LayerNorm, GELU, softmax and LayerScale, the z rule for
both einsum operands halved afterwards, the rescaled Add, Clone (a fork: the residual and the
branch; the normed tokens read by q, k and v) and IndexSelect (the CLS token; the patches carried
past a class-attention block). It loads timm's CaiT weights (random, perturbed) and must give
vitviz's R_A^l and G_l of every layer and its map (``vitviz.kinds.cait.attribution``), in
float64, and the kind's "transformer-attribution" method must be that map.
"""

from __future__ import annotations

import pytest
import timm
import torch
from lrp_reference import (
    RAdd,
    RClone,
    RConv2d,
    RefClassAttn,
    RefMlp,
    REinsum,
    RIndexSelect,
    RLayerNorm,
    RLinear,
    RSoftmax,
    assert_batch_is_one_by_one,
    assert_close_scaled,
    assert_layers_equal,
    assert_relevance_refusals,
    backward_and_relprop,
    keep_gradient,
    reference_rollout_map,
)
from torch import nn
from zoo_helpers import images, randomize_

from vitviz.checkpoints import load_checkpoint
from vitviz.explain.methods import get_method
from vitviz.kinds.cait.attribution import cait_attention_relevance, cait_transformer_attribution
from vitviz.pipeline.analysis import analyze

ARGS = dict(img_size=32, patch_size=8, embed_dim=32, depth=2, depth_token_only=2, num_heads=4)
GRID, P, S, L = (4, 4), 16, 2, 4


class RefTalkingHeads(nn.Module):
    """q·Kᵀ, proj_l over the heads, softmax, proj_w over the heads, A·V, proj."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.qkv, self.proj = RLinear(dim, 3 * dim), RLinear(dim, dim)
        self.proj_l, self.proj_w = RLinear(heads, heads), RLinear(heads, heads)
        self.matmul1 = REinsum("bhid,bhjd->bhij")
        self.matmul2 = REinsum("bhij,bhjd->bhid")
        self.softmax = RSoftmax(-1)

    def forward(self, x):
        b, n, d = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        dots = self.matmul1([qkv[0], qkv[1]]) * self.scale
        mixed = self.proj_l(dots.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        attn = self.proj_w(self.softmax(mixed).permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        self.attn = attn
        attn.register_hook(keep_gradient(self))
        return self.proj(self.matmul2([attn, qkv[2]]).transpose(1, 2).reshape(b, n, d))

    def relprop(self, R, alpha):
        R = self.proj.relprop(R, alpha)
        b, n, d = R.shape
        R = R.reshape(b, n, self.heads, d // self.heads).transpose(1, 2)
        r_attn, r_v = (t / 2 for t in self.matmul2.relprop(R, alpha))
        self.attn_cam = r_attn
        r = self.proj_w.relprop(r_attn.permute(0, 2, 3, 1), alpha).permute(0, 3, 1, 2)
        r = self.softmax.relprop(r, alpha)
        r = self.proj_l.relprop(r.permute(0, 2, 3, 1), alpha).permute(0, 3, 1, 2)
        r_q, r_k = (t / 2 for t in self.matmul1.relprop(r, alpha))
        r_qkv = torch.stack([r_q, r_k, r_v]).permute(1, 3, 0, 2, 4).reshape(b, n, 3 * d)
        return self.qkv.relprop(r_qkv, alpha)


class RefCaitClassAttn(RefClassAttn):
    """The CLS's q (index 0 of the normed tokens) over k, v of every token: the normed tokens
    forked three ways, the CLS picked for q."""

    def __init__(self, dim, heads):
        super().__init__(dim, heads)
        self.clone, self.pick = RClone(), RIndexSelect()

    def forward(self, u):
        u_q, u_k, u_v = self.clone(u, 3)
        return super().forward(self.pick(u_q, dim=1, indices=torch.tensor([0])), u_k, u_v)

    def relprop(self, R, alpha):
        r_cls, r_u_k, r_u_v = super().relprop(R, alpha)
        return self.clone.relprop((self.pick.relprop(r_cls, alpha), r_u_k, r_u_v), alpha)


class RefSelfBlock(nn.Module):
    """On the patches: x + γ1·TH(norm1(x)), then + γ2·mlp(norm2(·)); LayerScale passes R on."""

    def __init__(self, dim, heads, hidden, eps):
        super().__init__()
        self.norm1, self.norm2 = RLayerNorm(dim, eps=eps), RLayerNorm(dim, eps=eps)
        self.attn, self.mlp = RefTalkingHeads(dim, heads), RefMlp(dim, hidden)
        self.gamma_1, self.gamma_2 = nn.Parameter(torch.ones(dim)), nn.Parameter(torch.ones(dim))
        self.add1, self.add2, self.clone1, self.clone2 = RAdd(), RAdd(), RClone(), RClone()

    def forward(self, x):
        x1, x2 = self.clone1(x, 2)
        x = self.add1([x1, self.gamma_1 * self.attn(self.norm1(x2))])
        x1, x2 = self.clone2(x, 2)
        return self.add2([x1, self.gamma_2 * self.mlp(self.norm2(x2))])

    def relprop(self, R, alpha):
        r1, r2 = self.add2.relprop(R, alpha)
        R = self.clone2.relprop((r1, self.norm2.relprop(self.mlp.relprop(r2, alpha), alpha)), alpha)
        r1, r2 = self.add1.relprop(R, alpha)
        return self.clone1.relprop(
            (r1, self.norm1.relprop(self.attn.relprop(r2, alpha), alpha)), alpha
        )


class RefClassBlock(nn.Module):
    """[CLS, patches] -> [CLS updated, patches carried]: the CLS by class attention and MLP."""

    def __init__(self, dim, heads, hidden, eps):
        super().__init__()
        self.norm1, self.norm2 = RLayerNorm(dim, eps=eps), RLayerNorm(dim, eps=eps)
        self.attn, self.mlp = RefCaitClassAttn(dim, heads), RefMlp(dim, hidden)
        self.gamma_1, self.gamma_2 = nn.Parameter(torch.ones(dim)), nn.Parameter(torch.ones(dim))
        self.add1, self.add2, self.clone1, self.clone2 = RAdd(), RAdd(), RClone(), RClone()
        self.cls, self.patches = RIndexSelect(), RIndexSelect()

    def forward(self, x):
        x1, x2 = self.clone1(x, 2)
        n = x.shape[1]
        c = self.cls(x1, dim=1, indices=torch.tensor([0]))
        p = self.patches(x1, dim=1, indices=torch.arange(1, n))
        c = self.add1([c, self.gamma_1 * self.attn(self.norm1(x2))])
        c1, c2 = self.clone2(c, 2)
        c = self.add2([c1, self.gamma_2 * self.mlp(self.norm2(c2))])
        return torch.cat([c, p], dim=1)

    def relprop(self, R, alpha):
        r_c, r_p = R[:, :1], R[:, 1:]
        r1, r2 = self.add2.relprop(r_c, alpha)
        r_c = self.clone2.relprop(
            (r1, self.norm2.relprop(self.mlp.relprop(r2, alpha), alpha)), alpha
        )
        r_c, r_branch = self.add1.relprop(r_c, alpha)
        r_x2 = self.norm1.relprop(self.attn.relprop(r_branch, alpha), alpha)
        r_x1 = self.cls.relprop(r_c, alpha) + self.patches.relprop(r_p, alpha)
        return self.clone1.relprop((r_x1, r_x2), alpha)


class RefCait(nn.Module):
    """timm's CaiT layout and key names: patches + positions, SA blocks, CLS joined, CA blocks,
    the final norm, the CLS picked, the head."""

    def __init__(self, dim, heads, classes, eps=1e-6):
        super().__init__()
        self.patch_embed = nn.Module()
        self.patch_embed.proj = RConv2d(3, dim, kernel_size=8, stride=8)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, P, dim))
        self.blocks = nn.ModuleList(RefSelfBlock(dim, heads, 4 * dim, eps) for _ in range(S))
        self.blocks_token_only = nn.ModuleList(
            RefClassBlock(dim, heads, 4 * dim, eps) for _ in range(L - S)
        )
        self.norm, self.head, self.pool = (
            RLayerNorm(dim, eps=eps),
            RLinear(dim, classes),
            RIndexSelect(),
        )

    def forward(self, x):
        x = self.patch_embed.proj(x).flatten(2).transpose(1, 2) + self.pos_embed
        for block in self.blocks:
            x = block(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        for block in self.blocks_token_only:
            x = block(x)
        return self.head(self.pool(self.norm(x), dim=1, indices=torch.tensor(0)).squeeze(1))

    def relprop(self, R, alpha=1):
        R = self.norm.relprop(
            self.pool.relprop(self.head.relprop(R, alpha).unsqueeze(1), alpha), alpha
        )
        for block in reversed(self.blocks_token_only):
            R = block.relprop(R, alpha)
        R = R[:, 1:]  # the CLS joined here: the learnt token, its relevance not passed on
        for block in reversed(self.blocks):
            R = block.relprop(R, alpha)
        return R


def reference_layers(ref):
    """Each layer's (R_A, G) as the reference computed them, in the captured layout
    (1, H, 1 + P, 1 + P): a self-attention layer's at [1:, 1:], a class-attention row at [0]."""
    out = []
    for layer, block in enumerate([*ref.blocks, *ref.blocks_token_only]):
        pair = []
        for t in (block.attn.attn_cam.detach(), block.attn.attn_gradients):
            full = torch.zeros(1, t.shape[1], P + 1, P + 1, dtype=torch.float64)
            if layer < S:
                full[:, :, 1:, 1:] = t
            else:
                full[:, :, :1] = t
            pair.append(full)
        out.append(pair)
    return out


def tiny_cait(seed):
    torch.manual_seed(seed)
    model = timm.create_model("cait_xxs24_224", pretrained=False, num_classes=5, **ARGS)
    return randomize_(model, seed=seed).double()


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """timm's CaiT (float64), the reference on its weights, vitviz's on its checkpoint."""
    timm_model = tiny_cait(3)
    path = tmp_path_factory.mktemp("cait_lrp") / "cait.pth"
    torch.save(timm_model.state_dict(), path)
    ref = RefCait(32, 4, 5).double()
    ref.load_state_dict(timm_model.state_dict(), strict=True)
    ours = load_checkpoint(path).model.double().eval()
    return timm_model, ref.eval(), ours, path


@pytest.mark.parametrize("target", [None, 2])
def test_every_layer_and_the_map_equal_the_reference_float64(models, target):
    timm_model, ref, ours, _ = models
    x = images(1, 32, 32, seed=4).double()
    logits = ref(x)
    torch.testing.assert_close(logits, timm_model(x), rtol=0, atol=1e-12)  # the same network
    c, _ = backward_and_relprop(ref, logits, target)
    layers = reference_layers(ref)
    res = cait_attention_relevance(ours, x, target)
    torch.testing.assert_close(res.logits, logits.detach(), rtol=0, atol=1e-12)
    assert int(res.target) == c
    assert_layers_equal(layers, res)
    for start_layer in (0, 1, S):
        for query, patch in ((0, None), (1 + 6, (1, 2))):
            want = reference_rollout_map(layers, query, start_layer, GRID)
            got = cait_transformer_attribution(ours, x, target, start_layer, patch)[0]
            assert_close_scaled(got, want, f"map from layer {start_layer}, query {patch}")
            assert want.std() > 0.01  # a map with structure, not a constant one


def test_the_kinds_method_is_the_map(models, photo_files):
    _, _, _, path = models
    a = analyze(load_checkpoint(path), photo_files["chelsea"], gradients=True)
    assert get_method("transformer-attribution").unavailable(a) is None
    model = a.loaded.model
    x = a.input[None].to(next(model.parameters()).dtype)
    for cls in (None, 1):
        c = a.top_class if cls is None else cls
        for patch, start in ((None, 0), ((2, 3), 0), (None, 1)):
            got = get_method("transformer-attribution")(a, patch, cls, {"start_layer": start})
            want = cait_transformer_attribution(model, x, c, start, patch)[0]
            torch.testing.assert_close(got, want.to(got.dtype), rtol=1e-6, atol=1e-6)
    assert got.shape == GRID and float(got.max()) == pytest.approx(1.0)


def test_refusals(models):
    _, _, ours, _ = models
    x = images(1, 32, 32).double()
    assert_relevance_refusals(cait_attention_relevance, ours, x, "vitviz's own CaiT")


def test_a_batch_equals_its_images_one_by_one(models):
    _, _, ours, _ = models
    x = images(2, 32, 32, seed=5).double()
    assert_batch_is_one_by_one(cait_attention_relevance, ours, x, [1, 4])
