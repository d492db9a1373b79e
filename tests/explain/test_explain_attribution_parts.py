"""Transformer attribution on the parts of the other ViT families, in float64.

The reference is written from the rules (the docstring of vitviz/explain/attribution.py) in the
manner of the authors' code (tests/lrp_reference.py): modules remember their inputs and hand
relevance down by autograd. What it adds to the authors' modules, each from its rule:

- ``RRotary``: the rotary turn written out pair by pair, its relevance by the z rule through
  autograd (vitviz turns back in closed form);
- ``RMul``: SwiGLU's elementwise product, the z rule to both factors, halved by the caller (as
  the authors halve their einsums); ``RSiLU`` and the sub-LN norms: unchanged;
- the relative position bias: added after Q·Kᵀ; the scores' relevance all goes to the product;
- residual post-norm: a LayerNorm on each branch (unchanged); ``RRMSNorm`` and qk-norm: norms
  (unchanged);
- ``RShare``: grouped-query attention's kv head used by each of its query heads (a fork), its
  relevance by the z rule through autograd as the authors' Clone (vitviz sums in closed form);
- ``RefParallelBlock``: a parallel block's fused Linear, its two branches added (``RAdd``) and
  the residual add;
- ``RefBranchedBlock``: a block of several branches, each a ``RefAttention`` or ``RefMlp`` on
  its own norm, their outputs summed (``RSum``: the authors' rescaled Add over any number of
  operands) and the residual added; the input cloned to the residual and every branch;
- ``RefPool``: the attention pool, the probe's query a constant, its k and v rows of the
  packed in-projection one Linear (as a block's qkv).

The reference network shares nothing with vitviz's relevance code: it is loaded with the
weights of a vitviz ViT and reads the forward pass's tables (rotary angles, position bias).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import random_vit
from lrp_reference import (
    RAdd,
    RClone,
    REinsum,
    RelModule,
    RIndexSelect,
    RLayerNorm,
    RLinear,
    RSoftmax,
    authors_safe_divide,
)
from torch import nn

from vitviz.explain import attention_relevance, transformer_attribution
from vitviz.explain.attribution import product_rule, rotary_rule

# -- the reference's parts -------------------------------------------------------------------------


def _linear(source: nn.Linear | None, weight=None, bias=None) -> RLinear:
    """An RLinear holding a copy of ``source``'s (or the given) weight and bias."""
    weight = source.weight if source is not None else weight
    bias = source.bias if source is not None else bias
    ref = RLinear(weight.shape[1], weight.shape[0], bias=bias is not None).to(weight.dtype)
    with torch.no_grad():
        ref.weight.copy_(weight)
        if bias is not None:
            ref.bias.copy_(bias)
    return ref


class RRMSNorm(RelModule):
    """x · rsqrt(mean(x²) + eps) · weight, written out; relevance unchanged (a norm)."""

    def __init__(self, source: nn.Module):
        super().__init__()
        self.eps, self.weight = source.eps, nn.Parameter(source.weight.detach().clone())

    def forward(self, x):
        return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + self.eps) * self.weight


def _norm(source: nn.Module) -> nn.Module:
    """An RLayerNorm copy of a LayerNorm, an RRMSNorm of an RMSNorm, or an identity that passes
    relevance (nn.Identity)."""
    if type(source).__name__ == "RMSNorm":
        return RRMSNorm(source)
    if not isinstance(source, nn.LayerNorm):
        return RIdentity()
    ref = RLayerNorm(source.normalized_shape, eps=source.eps).to(source.weight.dtype)
    ref.load_state_dict(source.state_dict())
    return ref


class RIdentity(RelModule):
    def forward(self, x):
        return x


class RScale(RelModule):
    """LayerScale: relevance unchanged."""

    def __init__(self, source: nn.Module):
        super().__init__()
        self.gamma = getattr(source, "gamma", None)

    def forward(self, x):
        return x if self.gamma is None else x * self.gamma


class RAct(RelModule):
    """Any activation (GELU, SiLU): relevance unchanged."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


class RMul(RelModule):
    def forward(self, operands):
        return operands[0] * operands[1]

    def relprop(self, R, alpha):
        z = self.forward(self.X)
        s = authors_safe_divide(R, z)
        c = torch.autograd.grad(z, self.X, s, retain_graph=True)
        return [self.X[0] * c[0], self.X[1] * c[1]]


def _pairs(hd: int, half: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The channels (i, j) of each rotary pair: (t, t + hd/2) rotate-half, (2t, 2t + 1) else."""
    if half:
        first = torch.arange(hd // 2)
        return first, first + hd // 2
    first = torch.arange(0, hd, 2)
    return first, first + 1


class RRotary(RelModule):
    """Each pair (a, b) turned by its angle: (a·cos θ − b·sin θ, b·cos θ + a·sin θ)."""

    def __init__(self, sin, cos, half):
        super().__init__()
        self.sin, self.cos, self.half = sin, cos, half

    def forward(self, x):
        i, j = _pairs(x.shape[-1], self.half)
        a, b = x[..., i], x[..., j]
        cos, sin = self.cos[..., i], self.sin[..., i]  # a pair's angle, on its first channel
        z = torch.zeros_like(x).index_copy(-1, i, a * cos - b * sin)
        return z.index_copy(-1, j, b * cos + a * sin)

    def relprop(self, R, alpha):
        z = self.forward(self.X)
        s = authors_safe_divide(R, z)
        (c,) = torch.autograd.grad(z, self.X, s, retain_graph=True)
        return self.X * c


class RShare(RelModule):
    """Grouped-query attention: each kv head (B, H_kv, N, hd) copied to its ``groups`` query
    heads, kv head j to heads j·groups .. (j + 1)·groups − 1, written as a loop of copies."""

    def __init__(self, groups: int):
        super().__init__()
        self.groups = groups

    def forward(self, x):
        return torch.stack([x[:, j] for j in range(x.shape[1]) for _ in range(self.groups)], 1)

    def relprop(self, R, alpha):
        z = self.forward(self.X)
        s = authors_safe_divide(R, z)
        (c,) = torch.autograd.grad(z, self.X, s, retain_graph=True)
        return self.X * c


class RefAttention(nn.Module):
    def __init__(self, attn: nn.Module, rope, bias):
        super().__init__()
        self.heads, self.hd, self.scale = attn.heads, attn.head_dim, attn.scale
        self.kv = (attn.qkv.weight.shape[0] // attn.head_dim - attn.heads) // 2  # kv heads
        groups = self.heads // self.kv  # a fork only where a kv head serves several
        self.share_k = RShare(groups) if groups > 1 else RIdentity()
        self.share_v = RShare(groups) if groups > 1 else RIdentity()
        self.prefix, self.bias = attn.prefix, bias
        self.qkv, self.proj, self.norm = _linear(attn.qkv), _linear(attn.proj), _norm(attn.norm)
        self.q_norm, self.k_norm = _norm(attn.q_norm), _norm(attn.k_norm)  # relevance: unchanged
        self.matmul1, self.matmul2 = REinsum("bhid,bhjd->bhij"), REinsum("bhij,bhjd->bhid")
        self.softmax = RSoftmax(-1)
        self.rot_q = self.rot_k = None
        if rope is not None:
            self.rot_q, self.rot_k = RRotary(*rope, attn.rope_half), RRotary(*rope, attn.rope_half)

    def _turn(self, rot, t):
        p = self.prefix
        return t if rot is None else torch.cat([t[:, :, :p], rot(t[:, :, p:])], dim=2)

    def _turn_back(self, rot, r):
        p = self.prefix
        return r if rot is None else torch.cat([r[:, :, :p], rot.relprop(r[:, :, p:], 1)], dim=2)

    def forward(self, x):
        b, n, _ = x.shape
        w = self.hd * self.kv  # q's rows, then k's and v's: H·hd + 2·H_kv·hd
        q, k, v = self.qkv(x).split([self.heads * self.hd, w, w], dim=-1)
        q, k, v = (t.reshape(b, n, -1, self.hd).transpose(1, 2) for t in (q, k, v))
        q, k = self.q_norm(q), self.k_norm(k)
        q, k = self._turn(self.rot_q, q), self._turn(self.rot_k, k)
        k, v = self.share_k(k), self.share_v(v)  # each query head's kv head
        scores = self.matmul1([q, k]) * self.scale
        attn = self.softmax(scores if self.bias is None else scores + self.bias)
        self.attn = attn
        attn.register_hook(self._keep_gradient)
        out = self.matmul2([attn, v]).transpose(1, 2).reshape(b, n, self.heads * self.hd)
        return self.proj(self.norm(out))

    def _keep_gradient(self, grad):
        self.attn_gradients = grad

    def relprop(self, R, alpha):
        R = self.norm.relprop(self.proj.relprop(R, alpha), alpha)
        b, n, _ = R.shape
        R = R.reshape(b, n, self.heads, self.hd).transpose(1, 2)
        r_attn, r_v = self.matmul2.relprop(R, alpha)
        r_attn, r_v = r_attn / 2, r_v / 2
        self.attn_cam = r_attn
        r_q, r_k = self.matmul1.relprop(self.softmax.relprop(r_attn, alpha), alpha)  # bias: none
        r_k, r_v = self.share_k.relprop(r_k / 2, alpha), self.share_v.relprop(r_v, alpha)
        r_q, r_k = self._turn_back(self.rot_q, r_q / 2), self._turn_back(self.rot_k, r_k)
        r_qkv = torch.cat([t.transpose(1, 2).reshape(b, n, -1) for t in (r_q, r_k, r_v)], -1)
        return self.qkv.relprop(r_qkv, alpha)


class RefMlp(nn.Module):
    def __init__(self, mlp: nn.Module):
        super().__init__()
        self.swiglu = hasattr(mlp, "fc1_g")
        if self.swiglu:
            self.fc1_g, self.fc1_x = _linear(mlp.fc1_g), _linear(mlp.fc1_x)
            self.act, self.mul, self.clone = RAct(F.silu), RMul(), RClone()
        else:
            self.fc1, self.act = _linear(mlp.fc1), RAct(mlp.act)
        self.norm, self.fc2 = _norm(mlp.norm), _linear(mlp.fc2)

    def forward(self, x):
        if self.swiglu:
            x1, x2 = self.clone(x, 2)
            hidden = self.mul([self.act(self.fc1_g(x1)), self.fc1_x(x2)])
        else:
            hidden = self.act(self.fc1(x))
        return self.fc2(self.norm(hidden))

    def relprop(self, R, alpha):
        R = self.norm.relprop(self.fc2.relprop(R, alpha), alpha)
        if not self.swiglu:
            return self.fc1.relprop(self.act.relprop(R, alpha), alpha)
        r_gate, r_up = (r / 2 for r in self.mul.relprop(R, alpha))
        r1 = self.fc1_g.relprop(self.act.relprop(r_gate, alpha), alpha)
        return self.clone.relprop((r1, self.fc1_x.relprop(r_up, alpha)), alpha)


class RefBlock(nn.Module):
    """Pre-norm, or residual post-norm (the norms on the branches' outputs)."""

    def __init__(self, block: nn.Module, rope, bias):
        super().__init__()
        self.post = block.res_post_norm
        self.norm1, self.norm2 = _norm(block.norm1), _norm(block.norm2)
        self.attn, self.mlp = RefAttention(block.attn, rope, bias), RefMlp(block.mlp)
        self.ls1, self.ls2 = RScale(block.ls1), RScale(block.ls2)
        self.add1, self.add2, self.clone1, self.clone2 = RAdd(), RAdd(), RClone(), RClone()

    def _branch(self, norm, fn, ls, x):
        return ls(norm(fn(x))) if self.post else ls(fn(norm(x)))

    def _branch_relprop(self, norm, fn, ls, R):
        R = ls.relprop(R, 1)
        if self.post:
            return fn.relprop(norm.relprop(R, 1), 1)
        return norm.relprop(fn.relprop(R, 1), 1)

    def forward(self, x):
        x1, x2 = self.clone1(x, 2)
        x = self.add1([x1, self._branch(self.norm1, self.attn, self.ls1, x2)])
        x1, x2 = self.clone2(x, 2)
        return self.add2([x1, self._branch(self.norm2, self.mlp, self.ls2, x2)])

    def relprop(self, R, alpha):
        r1, r2 = self.add2.relprop(R, alpha)
        r2 = self._branch_relprop(self.norm2, self.mlp, self.ls2, r2)
        R = self.clone2.relprop((r1, r2), alpha)
        r1, r2 = self.add1.relprop(R, alpha)
        r2 = self._branch_relprop(self.norm1, self.attn, self.ls1, r2)
        return self.clone1.relprop((r1, r2), alpha)


class RefParallelBlock(nn.Module):
    """A parallel block: one norm, one fused Linear to [MLP hidden, q, k, v], the attention
    and the MLP side by side, their outputs added, then the residual add."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.heads, self.hd, self.scale = block.heads, block.head_dim, block.scale
        self.split = block.split
        self.mlp_bias = None if block.mlp_bias is None else block.mlp_bias.detach()
        self.in_norm, self.in_proj = _norm(block.in_norm), _linear(block.in_proj)
        self.q_norm, self.k_norm = _norm(block.q_norm), _norm(block.k_norm)
        self.out_a, self.out_m = _linear(block.attn_out_proj), _linear(block.mlp_out_proj)
        self.act, self.ls = RAct(block.mlp_act), RScale(block.ls)
        self.matmul1, self.matmul2 = REinsum("bhid,bhjd->bhij"), REinsum("bhij,bhjd->bhid")
        self.softmax, self.clone, self.add_y, self.add = RSoftmax(-1), RClone(), RAdd(), RAdd()

    def forward(self, x):
        b, n, _ = x.shape
        x1, x2 = self.clone(x, 2)
        m, q, k, v = torch.split(self.in_proj(self.in_norm(x2)), self.split, dim=-1)
        m = m if self.mlp_bias is None else m + self.mlp_bias  # a bias: the rules ignore it
        q, k, v = (t.reshape(b, n, self.heads, self.hd).transpose(1, 2) for t in (q, k, v))
        attn = self.softmax(self.matmul1([self.q_norm(q), self.k_norm(k)]) * self.scale)
        self.attn = attn
        attn.register_hook(self._keep_gradient)
        ctx = self.matmul2([attn, v]).transpose(1, 2).reshape(b, n, -1)
        y = self.add_y([self.out_a(ctx), self.out_m(self.act(m))])
        return self.add([x1, self.ls(y)])

    def _keep_gradient(self, grad):
        self.attn_gradients = grad

    def relprop(self, R, alpha):
        r1, r2 = self.add.relprop(R, alpha)
        r_a, r_m = self.add_y.relprop(self.ls.relprop(r2, alpha), alpha)
        r_hidden = self.act.relprop(self.out_m.relprop(r_m, alpha), alpha)
        r_ctx = self.out_a.relprop(r_a, alpha)
        b, n, _ = r_ctx.shape
        r_ctx = r_ctx.reshape(b, n, self.heads, self.hd).transpose(1, 2)
        r_attn, r_v = (r / 2 for r in self.matmul2.relprop(r_ctx, alpha))
        self.attn_cam = r_attn
        r_q, r_k = (r / 2 for r in self.matmul1.relprop(self.softmax.relprop(r_attn, alpha), 1))
        r_qkv = [t.transpose(1, 2).reshape(b, n, -1) for t in (r_q, r_k, r_v)]
        r_in = self.in_proj.relprop(torch.cat([r_hidden, *r_qkv], dim=-1), alpha)
        return self.clone.relprop((r1, self.in_norm.relprop(r_in, alpha)), alpha)


class RSum(RelModule):
    """z = Σ_i t_i: the authors' Add (z rule, each share rescaled to |ΣR_i| of ΣR) over any
    number of operands."""

    def forward(self, operands):
        return torch.stack(list(operands)).sum(dim=0)

    def relprop(self, R, alpha):
        z = self.forward(self.X)
        s = authors_safe_divide(R, z)
        c = torch.autograd.grad(z, self.X, s, retain_graph=True)
        parts = [x * ci for x, ci in zip(self.X, c, strict=True)]
        every = sum(p.sum().abs() for p in parts)
        return [
            p * authors_safe_divide(authors_safe_divide(p.sum().abs(), every) * R.sum(), p.sum())
            for p in parts
        ]


class RefBranchedBlock(nn.Module):
    """A block of several branches: x + Σ_i ls_i(attn_i(norm_i(x))), then the same with MLPs;
    each branch its own attention (the layer's heads: the branches' side by side)."""

    def __init__(self, block: nn.Module):
        super().__init__()
        P = len(block.attns)
        self.attns = nn.ModuleList(RefAttention(b.attn, None, None) for b in block.attns)
        self.mlps = nn.ModuleList(RefMlp(f.mlp) for f in block.ffns)
        self.norms1 = nn.ModuleList(_norm(b.norm) for b in block.attns)
        self.norms2 = nn.ModuleList(_norm(f.norm) for f in block.ffns)
        self.ls1 = nn.ModuleList(RScale(b.ls) for b in block.attns)
        self.ls2 = nn.ModuleList(RScale(f.ls) for f in block.ffns)
        self.clone1, self.clone2, self.sum1, self.sum2 = RClone(), RClone(), RSum(), RSum()
        self.add1, self.add2, self.P = RAdd(), RAdd(), P

    def forward(self, x):
        x0, *xs = self.clone1(x, self.P + 1)
        parts = zip(self.norms1, self.attns, self.ls1, xs, strict=True)
        x = self.add1([x0, self.sum1([ls(a(n(xi))) for n, a, ls, xi in parts])])
        x0, *xs = self.clone2(x, self.P + 1)
        parts = zip(self.norms2, self.mlps, self.ls2, xs, strict=True)
        return self.add2([x0, self.sum2([ls(m(n(xi))) for n, m, ls, xi in parts])])

    @staticmethod
    def _half(R, sums, norms, fns, scales, clone, add):
        r0, r_sum = add.relprop(R, 1)
        rs = [
            n.relprop(f.relprop(ls.relprop(r, 1), 1), 1)
            for r, n, f, ls in zip(sums.relprop(r_sum, 1), norms, fns, scales, strict=True)
        ]
        return clone.relprop((r0, *rs), 1)

    def relprop(self, R, alpha):
        R = self._half(R, self.sum2, self.norms2, self.mlps, self.ls2, self.clone2, self.add2)
        R = self._half(R, self.sum1, self.norms1, self.attns, self.ls1, self.clone1, self.add1)
        self.attn_cam = torch.cat([a.attn_cam for a in self.attns], dim=1)
        self.attn_gradients = torch.cat([a.attn_gradients for a in self.attns], dim=1)
        return R


class RefPool(nn.Module):
    """The attention pool: probe query (a constant here), k and v Linear, out_proj, MLP."""

    def __init__(self, pool: nn.Module):
        super().__init__()
        self.heads = pool.heads
        D = pool.out_proj.in_features
        wq, wk, wv = pool.in_proj_weight.detach().chunk(3)
        bq, bk, bv = pool.in_proj_bias.detach().chunk(3)
        self.q = F.linear(pool.probe.detach(), wq, bq).reshape(1, self.heads, 1, D // self.heads)
        self.kv = _linear(None, torch.cat([wk, wv]), torch.cat([bk, bv]))
        self.out_proj, self.norm = _linear(pool.out_proj), _norm(pool.norm)
        self.fc1, self.fc2, self.act = _linear(pool.fc1), _linear(pool.fc2), RAct(pool.act)
        self.matmul1, self.matmul2 = REinsum("bhid,bhjd->bhij"), REinsum("bhij,bhjd->bhid")
        self.softmax, self.clone_h, self.add = RSoftmax(-1), RClone(), RAdd()

    def forward(self, tokens):
        B, N, D = tokens.shape
        H, hd = self.heads, D // self.heads
        k, v = self.kv(tokens).reshape(B, N, 2, H, hd).permute(2, 0, 3, 1, 4)
        attn = self.softmax(self.matmul1([self.q.expand(B, -1, -1, -1), k]) * hd**-0.5)
        self.attn = attn
        attn.register_hook(self._keep_gradient)
        h = self.out_proj(self.matmul2([attn, v]).reshape(B, D))
        h1, h2 = self.clone_h(h, 2)
        return self.add([h1, self.fc2(self.act(self.fc1(self.norm(h2))))])

    def _keep_gradient(self, grad):
        self.attn_gradients = grad

    def relprop(self, R, alpha):
        r1, r2 = self.add.relprop(R, alpha)
        r2 = self.fc1.relprop(self.act.relprop(self.fc2.relprop(r2, alpha), alpha), alpha)
        r_h = self.clone_h.relprop((r1, self.norm.relprop(r2, alpha)), alpha)
        B, D = r_h.shape
        H, hd = self.heads, D // self.heads
        r_ctx = self.out_proj.relprop(r_h, alpha).reshape(B, H, 1, hd)
        r_attn, r_v = self.matmul2.relprop(r_ctx, alpha)
        r_attn, r_v = r_attn / 2, r_v / 2
        self.attn_cam = r_attn
        _, r_k = self.matmul1.relprop(self.softmax.relprop(r_attn, alpha), alpha)
        r_kv = torch.stack([r_k / 2, r_v]).permute(1, 3, 0, 2, 4).reshape(B, -1, 2 * D)
        return self.kv.relprop(r_kv, alpha)


class RefViT(nn.Module):
    """A vitviz ViT's blocks, final norm, pooling (CLS or attention pool) and Linear head."""

    def __init__(self, model: nn.Module, x: torch.Tensor):
        super().__init__()
        self.model = model
        with torch.no_grad():
            tokens, grid = model.embed(x)
        n = tokens.shape[1]
        ropes = (
            model.rope.tables(grid, tokens)
            if model.rope is not None
            else [None] * len(model.blocks)
        )
        self.blocks = nn.ModuleList(
            RefParallelBlock(b)
            if hasattr(b, "in_proj")
            else RefBranchedBlock(b)
            if hasattr(b, "attns")
            else RefBlock(b, r, b.attn.position_bias(n))
            for b, r in zip(model.blocks, ropes, strict=True)
        )
        self.norm, self.fc_norm = _norm(model.norm), _norm(model.fc_norm)
        self.head = _linear(model.head)
        self.start = 0 if model.config.pool_include_prefix else model.num_prefix_tokens
        self.pool = RefPool(model.pool) if model.pool is not None else RIndexSelect()

    def forward(self, x):
        tokens, _ = self.model.embed(x)
        for block in self.blocks:
            tokens = block(tokens)
        tokens = self.norm(tokens)
        self.n = tokens.shape[1]
        if isinstance(self.pool, RefPool):
            pooled = self.pool(tokens[:, self.start :])
        else:
            pooled = self.pool(tokens, dim=1, indices=torch.tensor(0)).squeeze(1)
        return self.head(self.fc_norm(pooled))

    def relprop(self, R):
        R = self.fc_norm.relprop(self.head.relprop(R, 1), 1)
        if isinstance(self.pool, RefPool):
            r_in = self.pool.relprop(R, 1)
            R = torch.cat([r_in.new_zeros(r_in.shape[0], self.start, r_in.shape[2]), r_in], 1)
        else:
            R = self.pool.relprop(R.unsqueeze(1), 1)
        R = self.norm.relprop(R, 1)
        for block in reversed(self.blocks):
            R = block.relprop(R, 1)


def reference_map(ref: RefViT, x, target: int, start_layer: int = 0):
    """The reference's R_A^l, G_l, the probe's (R_p, G_p) over the tokens, and the map."""
    logits = ref(x)
    one_hot = torch.zeros_like(logits)
    one_hot[0, target] = 1.0
    (one_hot * logits).sum().backward()
    ref.relprop(one_hot)
    attn = [
        b if isinstance(b, (RefParallelBlock, RefBranchedBlock)) else b.attn for b in ref.blocks
    ]
    cams, grads = [a.attn_cam.detach() for a in attn], [a.attn_gradients for a in attn]
    a_bar = [(g * c).clamp(min=0).mean(dim=1) for c, g in zip(cams, grads, strict=True)]
    P, N = ref.model.num_prefix_tokens, ref.n
    probe = None
    if isinstance(ref.pool, RefPool):
        pad = torch.zeros(1, ref.pool.heads, ref.start, dtype=x.dtype)
        r_p = torch.cat([pad, ref.pool.attn_cam.detach()[:, :, 0]], dim=2)
        g_p = torch.cat([pad, ref.pool.attn_gradients[:, :, 0]], dim=2)
        probe = (r_p, g_p)
        row = (g_p * r_p).clamp(min=0).mean(dim=1)  # the probe's row: s
    else:
        row = torch.zeros(1, N, dtype=x.dtype)
        row[0, 0] = 1.0
    eye = torch.eye(N, dtype=x.dtype)
    joint = eye
    for m in a_bar[start_layer:]:
        joint = (m[0] + eye) @ joint  # M_L ⋯ M_s, M_l = Ā_l + I (the authors' rollout)
    cam = (row @ joint)[0, P:]
    return cams, grads, probe, (cam - cam.min()) / (cam.max() - cam.min()), logits.detach()


# -- tests -----------------------------------------------------------------------------------------

SIZE = dict(image_size=(24, 40))  # a 3 × 5 grid of 8-pixel patches

CASES = {
    "beit-table": dict(rel_pos_bias=True, layer_scale_init=0.5),
    "relpos-mlp": dict(rel_pos_bias=True, rel_pos_mlp=16),
    "eva02": dict(rope="axial", rope_half=True, swiglu=True, attn_norm=True, mlp_norm=True),
    "rope-mixed": dict(rope="mixed", num_register_tokens=1),
    "dinov3": dict(rope="dinov3", rope_half=True, num_register_tokens=2, layer_scale_init=0.3),
    "rpn": dict(res_post_norm=True),
    "rmsnorm": dict(norm="rmsnorm", attn_norm=True, mlp_norm=True, pre_norm=True),
    "qk-norm": dict(qk_norm=True, rope="axial", rope_half=True, num_register_tokens=1),
    "rms-qk-norm": dict(norm="rmsnorm", qk_norm=True, layer_scale_init=0.5),
    "gqa": dict(heads=4, kv_heads=(4, 2, 1)),  # kv head j serves query heads 2j, 2j + 1
    "sapiens2": dict(
        heads=4,
        kv_heads=(4, 2, 4),
        qk_norm=True,
        norm="rmsnorm",
        rope="dinov3",
        rope_half=True,
        rope_temperature=100.0,
        num_register_tokens=8,
        swiglu=True,
        layer_scale_init=0.5,
        layer_scale_mlp=False,
    ),
    "parallel": dict(parallel=True, qk_norm=True),
    "parallel-rms": dict(
        parallel=True, norm="rmsnorm", qk_norm=True, qkv_bias=False, layer_scale_init=0.5
    ),
    "branches": dict(branches=2, layer_scale_init=0.5),
    "branches-3-qk-norm": dict(branches=3, qk_norm=True, attn_norm=True, mlp_norm=True),
    "map": dict(global_pool="map", class_token=False),
    "map-with-cls": dict(global_pool="map", num_register_tokens=1),
    "map-every-token": dict(global_pool="map", pool_include_prefix=True),
    "map-own-heads": dict(global_pool="map", pool_heads=4, pool_hidden_dim=48),
}


@pytest.mark.parametrize("name", list(CASES))
def test_every_layer_and_the_map_equal_the_rules_float64(name):
    model = random_vit(seed=11, depth=3, **SIZE, **CASES[name]).double()
    g = torch.Generator().manual_seed(11)
    x = torch.randn(1, 3, 24, 40, generator=g, dtype=torch.float64)
    target = 2
    ref = RefViT(model, x)
    cams, grads, probe, theirs, ref_logits = reference_map(ref, x, target)
    assert torch.allclose(ref_logits, model(x), rtol=1e-10, atol=1e-10)  # the same network
    res = attention_relevance(model, x, target)
    for r_a, g_a, cam, grad in zip(res.relevances, res.gradients, cams, grads, strict=True):
        assert torch.allclose(g_a, grad, rtol=1e-9, atol=1e-12)
        assert torch.allclose(r_a, cam, rtol=1e-7, atol=1e-12)
        assert r_a.abs().max() > 1e-4
    assert (res.probe_relevance is None) == (probe is None)
    if probe is not None:
        assert torch.allclose(res.probe_relevance, probe[0], rtol=1e-7, atol=1e-12)
        assert torch.allclose(res.probe_gradient, probe[1], rtol=1e-9, atol=1e-12)
    ours = transformer_attribution(model, x, target)[0].flatten()
    assert torch.allclose(ours, theirs, atol=1e-7)
    assert theirs.std() > 0.05  # a map with structure


def test_a_patch_query_on_an_attention_pool_model_reads_its_row():
    """With a clicked patch the map is the patch's row of R, as on any ViT; without, the
    probe's row differs from every token's own row."""
    from vitviz.explain.attribution import attribution_map
    from vitviz.explain.rollout import relevance

    model = random_vit(seed=12, depth=3, **SIZE, global_pool="map", class_token=False).double()
    x = torch.randn(1, 3, 24, 40, generator=torch.Generator().manual_seed(12)).double()
    res = attention_relevance(model, x, 1)
    patch = attribution_map(res, (1, 3))
    assert torch.allclose(patch, relevance(res.relevances, res.gradients, (3, 5), 0, 8))
    probe = attribution_map(res)
    assert not torch.allclose(probe, relevance(res.relevances, res.gradients, (3, 5), 0, None))


def test_rotary_rule_is_the_z_rule_of_the_turn():
    """Float64: R_x = x ⊙ Jᵀ(R/z) with J the turn's Jacobian, by autograd; conserves ΣR (a
    rotation has no bias); the prefix tokens' relevance passes unchanged."""
    from vitviz.blocks.rotary import apply_rotary

    g = torch.Generator().manual_seed(3)
    x, r = (torch.randn(2, 2, 7, 8, generator=g, dtype=torch.float64) for _ in range(2))
    angles = torch.randn(1, 1, 5, 4, generator=g, dtype=torch.float64)
    for half in (True, False):
        layout = torch.cat([angles, angles], -1) if half else angles.repeat_interleave(2, -1)
        rope = (layout.sin(), layout.cos())
        z, _ = apply_rotary(x, x, rope, 2, half)
        xg = x.clone().requires_grad_(True)
        s = authors_safe_divide(r, z)
        (jt,) = torch.autograd.grad(apply_rotary(xg, xg, rope, 2, half)[0], xg, s)
        out = rotary_rule(x, z, rope, 2, half, r)
        assert torch.allclose(out[:, :, 2:], (x * jt)[:, :, 2:], rtol=1e-10, atol=1e-12)
        assert torch.equal(out[:, :, :2], r[:, :, :2])


def test_product_rule_halves_each_factors_share():
    g = torch.Generator().manual_seed(4)
    a, b, r = (torch.randn(3, 6, generator=g, dtype=torch.float64) for _ in range(3))
    ra, rb = product_rule(a, b, r)
    assert torch.allclose(ra, r / 2, rtol=1e-6) and torch.equal(ra, rb)  # ε: the stabiliser
    zero = product_rule(torch.zeros(2), torch.ones(2), torch.ones(2))[0]
    assert torch.equal(zero, torch.zeros(2))  # no contribution, no relevance
