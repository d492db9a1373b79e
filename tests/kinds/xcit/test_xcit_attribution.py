"""Transformer Attribution on the XCiT kind against a reference written from the rules.

The reference below is timm's XCiT class-attention stage (its ``ClassAttentionBlock``: proj on
the CLS's attention output, the patches' normed tokens in the branch, ``tokens_norm`` or the CLS
alone through norm2, the residual that adds the patches to themselves) built, in the style of
the authors' code (``lrp_reference``), from modules that remember their inputs and propagate
relevance with autograd: the α-β rule for every Linear (α = 1), relevance passed unchanged
through LayerNorm, GELU, softmax and LayerScale, the z rule for both einsum operands halved
afterwards, the rescaled Add, Clone (every tensor read more than once) and IndexSelect (every
row picked: the CLS, the patches). It loads timm's weights (random, perturbed), reads the
patches from timm's own XCA blocks (no relevance goes below the class-attention blocks), and
must give vitviz's R_A^l and G_l of every class-attention layer and its map
(``vitviz.kinds.xcit.attribution``), in float64, for both ``tokens_norm`` settings (timm's nano
XCiTs have it off, the others on); the kind's "transformer-attribution" method must be that map.
"""

from __future__ import annotations

import pytest
import torch
from lrp_reference import (
    RAdd,
    RClone,
    RefClassAttn,
    RefMlp,
    RIndexSelect,
    RLayerNorm,
    RLinear,
    assert_batch_is_one_by_one,
    assert_close_scaled,
    assert_layers_equal,
    assert_relevance_refusals,
    backward_and_relprop,
    reference_rollout_map,
)
from test_zoo_xcit import tiny_xcit
from torch import nn
from zoo_helpers import images

from vitviz.checkpoints import load_checkpoint
from vitviz.explain.methods import get_method
from vitviz.kinds.xcit.attribution import (
    xcit_attention_relevance,
    xcit_relevance,
    xcit_transformer_attribution,
)
from vitviz.pipeline.analysis import analyze

GRID, P, L, D, HEADS = (4, 4), 16, 2, 32, 4
NAMES = {True: "xcit_tiny_12_p8_224", False: "xcit_nano_12_p8_224"}  # tokens_norm: timm's names


def _rows(n):
    return torch.tensor([0]), torch.arange(1, n)


class RefClassBlock(nn.Module):
    """timm's XCiT ClassAttentionBlock, every read of a tensor a Clone, every row an IndexSelect:
    x_attn = [attn(norm1(x)), norm1(x)_patches]; x = x + γ1·x_attn; norm2 (every token or the
    CLS); x = x + [γ2·mlp(x_CLS), x_patches]."""

    def __init__(self, dim, heads, hidden, eps, tokens_norm):
        super().__init__()
        self.norm1, self.norm2 = RLayerNorm(dim, eps=eps), RLayerNorm(dim, eps=eps)
        self.attn, self.mlp = RefClassAttn(dim, heads), RefMlp(dim, hidden)
        self.gamma1, self.gamma2 = nn.Parameter(torch.ones(dim)), nn.Parameter(torch.ones(dim))
        self.tokens_norm = tokens_norm
        self.add1, self.add2 = RAdd(), RAdd()
        self.clone_x, self.clone_u, self.clone_t = RClone(), RClone(), RClone()
        self.u_cls, self.u_patches = RIndexSelect(), RIndexSelect()
        self.m_cls, self.m_patches = RIndexSelect(), RIndexSelect()
        self.t_cls, self.t_patches = RIndexSelect(), RIndexSelect()

    def forward(self, x):
        cls, patches = _rows(x.shape[1])
        x_res, x_n = self.clone_x(x, 2)
        u_s, u_k, u_v = self.clone_u(self.norm1(x_n), 3)
        y = self.attn(self.u_cls(u_s, 1, cls), u_k, u_v)
        x_attn = torch.cat([y, self.u_patches(u_s, 1, patches)], dim=1)
        m = self.add1([x_res, self.gamma1 * x_attn])
        if self.tokens_norm:
            t = self.norm2(m)
        else:
            t = torch.cat([self.norm2(self.m_cls(m, 1, cls)), self.m_patches(m, 1, patches)], 1)
        t_res, t_s = self.clone_t(t, 2)
        c = self.gamma2 * self.mlp(self.t_cls(t_s, 1, cls))
        return self.add2([t_res, torch.cat([c, self.t_patches(t_s, 1, patches)], dim=1)])

    def relprop(self, R, alpha):
        r_res, r_b = self.add2.relprop(R, alpha)
        r_c = self.t_cls.relprop(self.mlp.relprop(r_b[:, :1], alpha), alpha)
        r_s = r_c + self.t_patches.relprop(r_b[:, 1:], alpha)
        R = self.clone_t.relprop((r_res, r_s), alpha)
        if self.tokens_norm:
            R = self.norm2.relprop(R, alpha)
        else:
            r_c = self.m_cls.relprop(self.norm2.relprop(R[:, :1], alpha), alpha)
            R = r_c + self.m_patches.relprop(R[:, 1:], alpha)
        r_res, r_b = self.add1.relprop(R, alpha)
        r_q, r_k, r_v = self.attn.relprop(r_b[:, :1], alpha)
        r_s = self.u_cls.relprop(r_q, alpha) + self.u_patches.relprop(r_b[:, 1:], alpha)
        r_u = self.norm1.relprop(self.clone_u.relprop((r_s, r_k, r_v), alpha), alpha)
        return self.clone_x.relprop((r_res, r_u), alpha)


class RefXcitTop(nn.Module):
    """timm's XCiT from the CLS's joining on (its key names): [cls_token, patches], the
    class-attention blocks, the final norm, the CLS picked, the head."""

    def __init__(self, tokens_norm, classes=5, eps=1e-6):
        super().__init__()
        self.cls_token = nn.Parameter(torch.zeros(1, 1, D))
        self.cls_attn_blocks = nn.ModuleList(
            RefClassBlock(D, HEADS, 4 * D, eps, tokens_norm) for _ in range(L)
        )
        self.norm, self.head = RLayerNorm(D, eps=eps), RLinear(D, classes)
        self.pool = RIndexSelect()

    def forward(self, p):
        x = torch.cat([self.cls_token.expand(p.shape[0], -1, -1), p], dim=1)
        for block in self.cls_attn_blocks:
            x = block(x)
        return self.head(self.pool(self.norm(x), dim=1, indices=torch.tensor(0)).squeeze(1))

    def relprop(self, R, alpha=1):
        R = self.norm.relprop(
            self.pool.relprop(self.head.relprop(R, alpha).unsqueeze(1), alpha), alpha
        )
        for block in reversed(self.cls_attn_blocks):
            R = block.relprop(R, alpha)
        return R  # the learnt CLS token's and the XCA blocks' output: the reference stops here


def timm_patches(model, x):
    """timm's XCiT up to its class-attention stage: the XCA blocks' output (B, P, D)."""
    p, (hp, wp) = model.patch_embed(x)
    p = p + model.pos_embed(p.shape[0], hp, wp).reshape(p.shape[0], -1, p.shape[1]).transpose(1, 2)
    for block in model.blocks:
        p = block(p, hp, wp)
    return p


def reference_layers(ref):
    """Each class-attention layer's (R_A, G) in the captured layout (1, H, 1 + P, 1 + P)."""
    out = []
    for block in ref.cls_attn_blocks:
        pair = []
        for t in (block.attn.attn_cam.detach(), block.attn.attn_gradients):
            full = torch.zeros(1, t.shape[1], P + 1, P + 1, dtype=torch.float64)
            full[:, :, :1] = t
            pair.append(full)
        out.append(pair)
    return out


@pytest.fixture(scope="module", params=[True, False], ids=["tokens_norm", "cls_norm"])
def models(request, tmp_path_factory):
    """timm's XCiT (float64), the reference on its weights, vitviz's on its checkpoint."""
    tokens_norm = request.param
    timm_model = tiny_xcit(NAMES[tokens_norm], seed=3).double()
    assert timm_model.cls_attn_blocks[0].tokens_norm is tokens_norm
    path = tmp_path_factory.mktemp("xcit_lrp") / "xcit.pth"
    torch.save(timm_model.state_dict(), path)
    top = ("cls_token", "cls_attn_blocks.", "norm.", "head.")
    state = {k: v for k, v in timm_model.state_dict().items() if k.startswith(top)}
    ref = RefXcitTop(tokens_norm).double()
    ref.load_state_dict(state, strict=True)
    config = {"image_size": 32, "tokens_norm": tokens_norm}
    ours = load_checkpoint(path, config=config).model.double().eval()
    assert ours.config.tokens_norm is tokens_norm
    return timm_model, ref.eval(), ours, path, config


@pytest.mark.parametrize("target", [None, 2])
def test_every_layer_and_the_map_equal_the_reference_float64(models, target):
    timm_model, ref, ours, _, _ = models
    x = images(1, 32, 32, seed=4).double()
    with torch.no_grad():
        p = timm_patches(timm_model, x)
    logits = ref(p)
    torch.testing.assert_close(logits, timm_model(x), rtol=0, atol=1e-12)  # the same network
    c, r_in = backward_and_relprop(ref, logits, target)
    r_in = r_in.detach()
    layers = reference_layers(ref)
    res, mine_in = xcit_relevance(ours, x, target)
    # at the stage's input: the patches' rules too (their doubling, their own normed tokens in
    # the branch, k's and v's forks), which reach R_A only through the adds' rescaling
    assert_close_scaled(mine_in, r_in, "relevance at the class-attention stage's input")
    assert float(r_in[:, 1:].abs().sum()) > 0.1 * float(r_in.abs().sum())  # the patches' share
    torch.testing.assert_close(res.logits, logits.detach(), rtol=0, atol=1e-12)
    assert int(res.target) == c and res.num_prefix_tokens == 1 and res.grid == GRID
    assert len(res.relevances) == len(res.gradients) == L
    assert_layers_equal(layers, res)
    for start_layer in range(L):
        want = reference_rollout_map(layers, 0, start_layer, GRID)
        got = xcit_transformer_attribution(ours, x, target, start_layer)[0]
        assert_close_scaled(got, want, f"map from layer {start_layer}")
        assert want.std() > 0.01  # a map with structure, not a constant one


def test_the_kinds_method_is_the_map(models, photo_files):
    _, _, _, path, config = models
    a = analyze(load_checkpoint(path, config=config), photo_files["chelsea"], gradients=True)
    method = get_method("transformer-attribution")
    assert method.unavailable(a) is None and "xcit" in method.applies_to
    model = a.loaded.model
    x = a.input[None].to(next(model.parameters()).dtype)
    for cls in (None, 1):
        c = a.top_class if cls is None else cls
        for start in (0, 1):
            got = method(a, None, cls, {"start_layer": start})
            want = xcit_transformer_attribution(model, x, c, start)[0]
            torch.testing.assert_close(got, want.to(got.dtype), rtol=1e-6, atol=1e-6)
            assert got.shape == GRID and float(got.max()) == pytest.approx(1.0)
    # a patch has no row in any layer: refused as relevance refuses it
    for name in ("relevance", "transformer-attribution"):
        with pytest.raises(ValueError, match="no layer of this model has a patch query"):
            get_method(name)(a, (1, 1), None, {"start_layer": 0})


def test_refusals(models):
    _, _, ours, _, _ = models
    x = images(1, 32, 32).double()
    assert_relevance_refusals(xcit_attention_relevance, ours, x, "vitviz's own XCiT")


def test_a_batch_equals_its_images_one_by_one(models):
    _, _, ours, _, _ = models
    x = images(2, 32, 32, seed=5).double()
    assert_batch_is_one_by_one(xcit_attention_relevance, ours, x, [1, 4])
