"""The relevance rules of the authors' public Transformer Attribution code, transcribed.

Transformer-Explainability (Chefer, Gur & Wolf 2021): baselines/ViT/layers_ours.py. Each module
remembers its inputs in a forward hook and propagates relevance with autograd: the α-β rule for
Linear (α = 1), relevance passed unchanged through LayerNorm, GELU, softmax and dropout, the z
rule for both einsum operands, the rescaled Add, Clone and IndexSelect. The tests build
reference networks of them and load vitviz's weights (tests/test_explain_attribution*.py).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn


def authors_safe_divide(a, b):
    """a / den · [b ≠ 0] with den = clamp(b, min=ε) + clamp(b, max=ε), bumped by ε where 0."""
    eps = 1e-9
    den = torch.clamp(b, min=eps) + torch.clamp(b, max=eps)
    den = den + (den == 0).to(den.dtype) * eps
    return a / den * (b != 0).to(b.dtype)


def _remember_inputs(module, inputs, _output):
    first = inputs[0]
    if isinstance(first, (list, tuple)):
        module.X = [t.detach().requires_grad_(True) for t in first]
    else:
        module.X = first.detach().requires_grad_(True)


class RelModule(nn.Module):
    """Base of the reference: keeps its inputs; relevance passes unchanged unless overridden."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register_forward_hook(_remember_inputs)

    def relprop(self, R, alpha):
        return R


class RLinear(RelModule, nn.Linear):
    def relprop(self, R, alpha):
        beta = alpha - 1
        w_pos, w_neg = self.weight.clamp(min=0), self.weight.clamp(max=0)
        x_pos, x_neg = self.X.clamp(min=0), self.X.clamp(max=0)

        def share(w1, w2, x1, x2):
            x1 = x1.detach().requires_grad_(True)
            x2 = x2.detach().requires_grad_(True)
            z1, z2 = F.linear(x1, w1), F.linear(x2, w2)
            s = authors_safe_divide(R, z1 + z2)
            (c1,) = torch.autograd.grad(z1, x1, s)
            (c2,) = torch.autograd.grad(z2, x2, s)
            return x1 * c1 + x2 * c2

        activators = share(w_pos, w_neg, x_pos, x_neg)
        inhibitors = share(w_neg, w_pos, x_pos, x_neg)
        return alpha * activators - beta * inhibitors


class RConv2d(RelModule, nn.Conv2d):
    pass  # the patch embedding: relevance is not propagated below the blocks here


class RLayerNorm(RelModule, nn.LayerNorm):
    pass


class RGELU(RelModule, nn.GELU):
    pass


class RSoftmax(RelModule, nn.Softmax):
    pass


class RDropout(RelModule, nn.Dropout):
    pass


class REinsum(RelModule):
    def __init__(self, equation):
        super().__init__()
        self.equation = equation

    def forward(self, operands):
        return torch.einsum(self.equation, *operands)

    def relprop(self, R, alpha):
        z = self.forward(self.X)
        s = authors_safe_divide(R, z)
        c = torch.autograd.grad(z, self.X, s, retain_graph=True)
        return [self.X[0] * c[0], self.X[1] * c[1]]


class RAdd(RelModule):
    def forward(self, operands):
        return torch.add(*operands)

    def relprop(self, R, alpha):
        z = self.forward(self.X)
        s = authors_safe_divide(R, z)
        c = torch.autograd.grad(z, self.X, s, retain_graph=True)
        a, b = self.X[0] * c[0], self.X[1] * c[1]
        a_sum, b_sum = a.sum(), b.sum()
        a_fact = authors_safe_divide(a_sum.abs(), a_sum.abs() + b_sum.abs()) * R.sum()
        b_fact = authors_safe_divide(b_sum.abs(), a_sum.abs() + b_sum.abs()) * R.sum()
        return [a * authors_safe_divide(a_fact, a.sum()), b * authors_safe_divide(b_fact, b.sum())]


class RClone(RelModule):
    def forward(self, x, num):
        self.num = num
        return [x for _ in range(num)]

    def relprop(self, R, alpha):
        zs = [self.X for _ in range(self.num)]
        s = [authors_safe_divide(r, z) for r, z in zip(R, zs, strict=True)]
        (c,) = torch.autograd.grad(zs, self.X, s, retain_graph=True)
        return self.X * c


class RIndexSelect(RelModule):
    def forward(self, x, dim, indices):
        self.dim, self.indices = dim, indices
        return torch.index_select(x, dim, indices)

    def relprop(self, R, alpha):
        z = self.forward(self.X, self.dim, self.indices)
        s = authors_safe_divide(R, z)
        (c,) = torch.autograd.grad(z, self.X, s, retain_graph=True)
        return self.X * c


# -- the same rules written from their definitions, on a library's own modules (CLIP, SigLIP) ------


def z_plus(x, weight, r):
    """The z⁺ rule (α = 1, β = 0) through a Linear x·Wᵀ, written from its definition."""
    wp, wn, xp, xn = weight.clamp(min=0), weight.clamp(max=0), x.clamp(min=0), x.clamp(max=0)
    s = r / (xp @ wp.T + xn @ wn.T)
    return xp * (s @ wp) + xn * (s @ wn)


def add_z(a, b, r):
    """z rule to both inputs of a + b, each rescaled to hold its |share| of ΣR."""
    ra, rb = a * r / (a + b), b * r / (a + b)
    sa, sb, total = ra.sum(), rb.sum(), r.sum()
    return (ra * (sa.abs() / (sa.abs() + sb.abs()) * total / sa),
            rb * (sb.abs() / (sa.abs() + sb.abs()) * total / sb))  # fmt: skip


def half_z(a, b, r):
    """z rule through a @ b to both operands, each halved."""
    s = r / (a @ b)
    return a * (s @ b.transpose(-2, -1)) / 2, b * (a.transpose(-2, -1) @ s) / 2


def library_block_relevances(layers, hidden, r):
    """R_A^l of each of a Hugging Face CLIP / SigLIP encoder's ``layers`` (layer_norm1,
    self_attn q/k/v/out_proj, layer_norm2, mlp fc1/fc2), first to last, from the relevance r
    (1, N, D) at the last layer's output; ``hidden``: the encoder's hidden states (L + 1)."""
    rel = []
    for layer in reversed(range(len(layers))):
        blk, h = layers[layer], hidden[layer]
        att = blk.self_attn
        x1 = blk.layer_norm1(h)
        H, hd = att.num_heads, att.head_dim
        q, k, vv = (m(x1).reshape(1, -1, H, hd).transpose(1, 2)
                    for m in (att.q_proj, att.k_proj, att.v_proj))  # fmt: skip
        A = ((q * hd**-0.5) @ k.transpose(-2, -1)).softmax(-1)
        ctx = (A @ vv).transpose(1, 2).reshape(1, -1, H * hd)
        mid = h + att.out_proj(ctx)
        x2 = blk.layer_norm2(mid)
        hid = blk.mlp.activation_fn(blk.mlp.fc1(x2))
        # the library's eager attention takes its softmax in float32 (1e-7 off in float64)
        torch.testing.assert_close(mid + blk.mlp.fc2(hid), hidden[layer + 1], rtol=0, atol=1e-6)
        r_mid, r_b2 = add_z(mid, blk.mlp.fc2(hid), r)
        r_x2 = z_plus(x2, blk.mlp.fc1.weight, z_plus(hid, blk.mlp.fc2.weight, r_b2))
        r_h, r_b1 = add_z(h, att.out_proj(ctx), r_mid + r_x2)  # the fork: added
        r_ctx = z_plus(ctx, att.out_proj.weight, r_b1)
        r_ctx = r_ctx.reshape(1, -1, H, hd).transpose(1, 2)
        r_A, r_val = half_z(A, vv, r_ctx)
        r_q, r_kt = half_z(q, k.transpose(-2, -1), r_A)  # softmax: unchanged
        parts = [r_q, r_kt.transpose(-2, -1), r_val]
        projections = (att.q_proj, att.k_proj, att.v_proj)
        r_x1 = sum(z_plus(x1, m.weight, rp.transpose(1, 2).reshape(1, -1, H * hd))
                   for m, rp in zip(projections, parts, strict=True))  # fmt: skip
        r = r_h + r_x1
        rel.insert(0, r_A)
    return rel


# -- pieces the CaiT's and the XCiT's reference networks share ------------------------------------


def keep_gradient(module):
    """A tensor hook that keeps the gradient on ``module.attn_gradients``."""

    def hook(grad):
        module.attn_gradients = grad

    return hook


class RefMlp(nn.Module):
    """fc1, GELU, fc2 of the authors' modules."""

    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1, self.act, self.fc2 = RLinear(dim, hidden), RGELU(), RLinear(hidden, dim)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))

    def relprop(self, R, alpha):
        return self.fc1.relprop(self.act.relprop(self.fc2.relprop(R, alpha), alpha), alpha)


class RefClassAttn(nn.Module):
    """timm's ClassAttn: the CLS's q over k, v of every normed token, proj on its output."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.q, self.k, self.v = RLinear(dim, dim), RLinear(dim, dim), RLinear(dim, dim)
        self.proj = RLinear(dim, dim)
        self.matmul1 = REinsum("bhid,bhjd->bhij")
        self.matmul2 = REinsum("bhij,bhjd->bhid")
        self.softmax = RSoftmax(-1)

    def forward(self, cls, u_k, u_v):
        b, n, d = u_k.shape
        h = self.heads
        q = self.q(cls).reshape(b, 1, h, d // h).transpose(1, 2)
        k = self.k(u_k).reshape(b, n, h, d // h).transpose(1, 2)
        v = self.v(u_v).reshape(b, n, h, d // h).transpose(1, 2)
        attn = self.softmax(self.matmul1([q, k]) * self.scale)
        self.attn = attn
        attn.register_hook(keep_gradient(self))
        return self.proj(self.matmul2([attn, v]).transpose(1, 2).reshape(b, 1, d))

    def relprop(self, R, alpha):
        """Relevance at proj's output (b, 1, d) -> at q's input (the CLS), k's and v's."""
        R = self.proj.relprop(R, alpha)
        b, _, d = R.shape
        h = self.heads
        R = R.reshape(b, 1, h, d // h).transpose(1, 2)
        r_attn, r_v = (t / 2 for t in self.matmul2.relprop(R, alpha))
        self.attn_cam = r_attn
        r_q, r_k = (t / 2 for t in self.matmul1.relprop(self.softmax.relprop(r_attn, alpha), alpha))
        n = r_k.shape[2]
        r_cls = self.q.relprop(r_q.transpose(1, 2).reshape(b, 1, d), alpha)
        r_u_k = self.k.relprop(r_k.transpose(1, 2).reshape(b, n, d), alpha)
        r_u_v = self.v.relprop(r_v.transpose(1, 2).reshape(b, n, d), alpha)
        return r_cls, r_u_k, r_u_v


def backward_and_relprop(ref, logits, target):
    """The reference's gradients and relevance for class ``target`` (None: the top one) of its
    ``logits`` (1, C); returns (the class, the relevance at the reference's input)."""
    c = int(logits.argmax()) if target is None else target
    one_hot = torch.zeros_like(logits)
    one_hot[0, c] = 1.0
    ref.zero_grad()
    (one_hot * logits).sum().backward()
    return c, ref.relprop(one_hot)


def reference_rollout_map(layers, query, start_layer, grid):
    """Row ``query`` of (I + Ā_L) ⋯ (I + Ā_s) over the patches (after the one CLS), Ā_l =
    mean_h((G ⊙ R_A)⁺), min-max scaled onto ``grid``; ``layers``: each layer's (R_A, G),
    (1, H, 1 + P, 1 + P)."""
    n = layers[0][0].shape[-1]
    eye = torch.eye(n, dtype=torch.float64)
    joint = eye
    for r_a, g in layers[start_layer:]:
        joint = (eye + (g[0] * r_a[0]).clamp(min=0).mean(dim=0)) @ joint
    row = joint[query, 1:]
    return ((row - row.min()) / (row.max() - row.min())).reshape(grid)


def assert_layers_equal(layers, res):
    """Each layer's R_A and G of a relevance result ``res`` equal the reference's ``layers``."""
    for layer, ((r_a, g), mine_r, mine_g) in enumerate(
        zip(layers, res.relevances, res.gradients, strict=True)
    ):
        assert_close_scaled(mine_r, r_a, f"R_A of layer {layer}")
        assert_close_scaled(mine_g, g, f"G of layer {layer}")


def assert_relevance_refusals(relevance, model, x, whose):
    """``relevance(model, x)`` refuses a model in training mode, and anything but ``whose``
    (e.g. "vitviz's own CaiT"), by name."""
    model.train()
    try:
        with pytest.raises(ValueError, match="eval mode"):
            relevance(model, x)
    finally:
        model.eval()
    with pytest.raises(ValueError, match=whose):
        relevance(nn.Linear(2, 2), x)


def assert_batch_is_one_by_one(relevance, model, x, targets):
    """``relevance`` of a batch ``x`` for ``targets`` equals each image's alone, layer by
    layer, its R_A and G."""
    both = relevance(model, x, torch.tensor(targets))
    for i, c in enumerate(targets):
        one = relevance(model, x[i : i + 1], c)
        for mine, theirs in zip(both.relevances, one.relevances, strict=True):
            torch.testing.assert_close(mine[i : i + 1], theirs, rtol=1e-9, atol=1e-15)
        for mine, theirs in zip(both.gradients, one.gradients, strict=True):
            torch.testing.assert_close(mine[i : i + 1], theirs, rtol=1e-9, atol=1e-15)


def assert_close_scaled(mine, theirs, what):
    """Equal to 1e-9 of the reference's largest value (which must not be 0)."""
    scale = float(theirs.abs().max())
    assert scale > 1e-6, f"{what}: nothing to compare"
    torch.testing.assert_close(mine, theirs, rtol=1e-9, atol=1e-9 * scale, msg=what)
