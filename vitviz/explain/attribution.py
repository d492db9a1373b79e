"""Transformer Attribution (Chefer, Gur & Wolf, CVPR 2021) on vitviz's own ViT.

LRP relevance with the α = 1, β = 0 rule is propagated from the class logit down through the
head, the final norm and every block to each block's attention map, giving R_A^l (B, H, N, N).
With G_l = ∂y_c/∂A_l: Ā_l = mean_h((G_l ⊙ R_A^l)⁺); R = I; R = R + Ā_l·R for l = s..L;
the map is R[q, patches] (q = CLS), min-max scaled.

The rules are those of the authors' public code, written here in closed form on the model's
own weights (nothing in ``vitviz.blocks`` changes):

- Linear: z⁺ rule, R_in = x⁺ ⊙ (S·W⁺) + x⁻ ⊙ (S·W⁻), S = R / (x⁺W⁺ᵀ + x⁻W⁻ᵀ) (bias ignored);
- LayerNorm, GELU (any activation), softmax, dropout, LayerScale: relevance passes unchanged;
- A·V and Q·Kᵀ: z rule to both operands, each halved;
- residual add: z rule to both inputs, then each rescaled so their sums keep the ratio
  |Σa| : |Σb| and together hold ΣR; the fork before a branch: the two relevances added.

The same rules carry the parts of the other ViT families, each written from them:

- a relative position bias added to the scores (BEiT's table, timm relpos's MLP): a bias, which
  the rules ignore as the Linear's: the scores' relevance all goes to Q·Kᵀ;
- rotary positions (RoPE) turning q and k: per token a fixed linear map z = J·x with no bias, so
  the z rule, R_x = x ⊙ Jᵀ(R / z) (Jᵀ turns back by the same angles); prefix tokens are not
  turned and their relevance passes unchanged;
- sub-LN (a LayerNorm on the heads' output, or on the MLP's hidden layer), residual
  post-norm (a LayerNorm on each branch's output), qk-norm (a norm on each head's q and k)
  and RMSNorm in place of any LayerNorm: norms, unchanged;
- grouped-query attention (fewer kv heads than query heads, ``Attention.kv_heads``): a kv
  head's k and v feed each of its query heads, a fork: x ⊙ Σ_j (R_j / x) over those heads
  (before the rotary turn back of k); the qkv Linear's rows are [q; k; v], k and v narrower;
- a parallel block (attention and MLP side by side on one norm, their inputs from one fused
  Linear, ``vitviz.blocks.parallel``): the residual add, then the sum of the two branches by the
  add rule; each branch down to its slice of the fused Linear's output, and that Linear by the
  z⁺ rule at once (the fork of its input: the two branches' relevances added);
- a block of several branches (``vitviz.blocks.branches``: x + Σ_i attn_i(norm_i(x)), then
  the same with MLPs): the residual add, then the branches' sum to each branch by the z rule,
  each rescaled to its share of ΣR as the add rule does (for two branches, the add rule
  itself); every branch by its own rules, its heads' relevance R_A the rows of the layer's
  joint attention (B, P·H, N, N) that are its own; the fork at the block's input x (used by
  the residual and every branch): x ⊙ Σ_j (R_j / x);
- SwiGLU, h = SiLU(x·W_gᵀ) ⊙ (x·W_xᵀ): the product's z rule to both factors, each halved (as
  A·V's), SiLU unchanged, each Linear by the z⁺ rule and the fork at x adding the two;
- an attention-pool head (MAP): the probe's attention is one more attention, a·V and q·Kᵀ as
  above (q's half goes to the probe, a parameter, and is not passed on), W_o, the residual MLP
  and its fork as in a block, and [W_k; W_v] by the z⁺ rule to the tokens the pool reads. With
  G_p = ∂y_c/∂a and R_p its relevance (H, N), the map without a clicked patch is the probe's row
  s·R, s = mean_h((G_p ⊙ R_p)⁺) (no identity term: the probe is not a token), as relevance
  starts from the probe (``vitviz.kinds.vit.probe_analysis``).

A head that is not a Linear gives its own first step (``head.relevance(x, r)``, x (B, D) the
head's input, r (B, C) the one-hot relevance of the class) as the relevance at the output of a
bias-free Linear over x and that Linear's weight, from which the z⁺ rule goes on (or, with the
weight None, as the relevance at x itself: a SigLIP's head, which has no projection). A CLIP's
prompt head (``vitviz.kinds.clip.network.PromptHead``) scores y = s·(t̂·v)/|v|, v = W·x: with
the norm |v| taken as a constant (as LRP for LayerNorm takes its scale; Ali et al. 2022), y is
linear in v, and its LRP-0 relevance at v is R_v = (s/|v|)·t̂ ⊙ v (the prompt's contributions:
they sum to y, the logit's value, where a ViT's Linear head hands on the one-hot 1); then W by
the z⁺ rule, the final LayerNorm unchanged, the CLS token's pooling and the blocks as above.

Divisions use the authors' stabiliser: a / (b + 1e-9), and 0 where b = 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vitviz.blocks.branches import BranchedBlock
from vitviz.blocks.parallel import ParallelBlock
from vitviz.blocks.rotary import apply_rotary, rotate
from vitviz.blocks.swiglu import SwiGLU
from vitviz.explain.rollout import relevance
from vitviz.explain.targets import target_classes
from vitviz.explain.tokens import query_token

Rope = tuple[Tensor, Tensor] | None  # one layer's rotary (sin, cos) tables, or None

EPS = 1e-9


@dataclass
class _BlockTrace:
    """What one block's relevance propagation needs from the forward pass (no batch dropped)."""

    res1: Tensor  # (B, N, D) residual input of the attention add; also the fork's input
    branch1: Tensor  # (B, N, D) attention branch output (after LayerScale)
    attn_in: Tensor  # (B, N, D) input of qkv
    q_in: Tensor  # (B, H, N, hd) q before the rotary turn (q itself without one), unscaled
    k_in: Tensor
    q: Tensor  # (B, H, N, hd) q as the scores read it, unscaled
    k: Tensor
    v: Tensor
    attn: Tensor  # (B, H, N, N), part of the autograd graph
    ctx: Tensor  # (B, N, heads·hd) input of proj (after the sub-LN, if any)
    res2: Tensor  # (B, N, D) residual input of the MLP add; also the fork's input
    branch2: Tensor  # (B, N, D) MLP branch output (after LayerScale)
    mlp_in: Tensor  # (B, N, D) input of fc1 (of fc1_g and fc1_x: SwiGLU)
    hidden: Tensor  # (B, N, hidden) input of fc2 (after the activation and the sub-LN)
    rope: Rope = None  # the rotary tables that turned q and k
    gate: Tensor | None = None  # (B, N, hidden) SwiGLU's SiLU(fc1_g x) ...
    up: Tensor | None = None  # ... and fc1_x x, whose product is the hidden layer
    groups: int = 1  # grouped-query attention: query heads per kv head (k_in, k, v have H/groups)


@dataclass
class _BranchedTrace:
    """A block of several branches' forward (``vitviz.blocks.branches``), for its relevance:
    lists hold one entry per branch."""

    res1: Tensor  # (B, N, D) the block's input: the residual and every attention branch's
    attn_in: list[Tensor]  # (B, N, D) each branch's norm(x), input of its qkv
    q: Tensor  # (B, P·H, N, hd) every branch's heads side by side, unscaled
    k: Tensor
    v: Tensor
    attn: Tensor  # (B, P·H, N, N), part of the autograd graph
    ctx: list[Tensor]  # (B, N, H·hd) each branch's proj input (after its sub-LN, if any)
    branch1: list[Tensor]  # (B, N, D) each attention branch's output (after LayerScale)
    res2: Tensor  # (B, N, D) x + Σ branch1: the residual and every MLP branch's input
    mlp_in: list[Tensor]  # (B, N, D) each MLP branch's norm output, input of its fc1
    hidden: list[Tensor]  # (B, N, hidden) each MLP branch's fc2 input
    branch2: list[Tensor]  # (B, N, D) each MLP branch's output (after LayerScale)


@dataclass
class _PoolTrace:
    """An attention-pool head's forward (``vitviz.blocks.attention_pool``), for its relevance."""

    tokens: Tensor  # (B, N', D) the tokens the pool reads
    q: Tensor  # (1, H, 1, hd) the probe's query, unscaled
    k: Tensor  # (B, H, N', hd)
    v: Tensor
    attn: Tensor  # (B, H, 1, N') the probe's attention, part of the autograd graph
    ctx: Tensor  # (B, D) input of out_proj
    h: Tensor  # (B, D) out_proj's output: the residual input of the MLP add, the fork's input
    mlp_in: Tensor  # (B, D) LayerNorm(h), input of fc1
    hidden: Tensor  # (B, hidden) input of fc2
    mlp_out: Tensor  # (B, D)


@dataclass
class _Trace:
    logits: Tensor  # (B, C)
    blocks: list[_BlockTrace] = field(default_factory=list)
    tokens: Tensor | None = None  # (B, N, D) after the final norm
    pooled: Tensor | None = None  # (B, D) CLS token or token mean, before fc_norm
    head_in: Tensor | None = None  # (B, D') input of the head Linear
    pre_in: Tensor | None = None  # (B, D) input of the pre-logits Linear, when there is one
    dist_in: Tensor | None = None  # (B, D) input of the distillation head
    head_out: Tensor | None = None  # (B, C) head output (DeiT distilled only)
    dist_out: Tensor | None = None  # (B, C) distillation head output
    pool: _PoolTrace | None = None  # the attention pool's forward (MAP heads)
    grid: tuple[int, int] = (0, 0)


@dataclass
class AttributionResult:
    logits: Tensor  # (B, C) detached
    target: Tensor  # (B,) long
    relevances: list[Tensor]  # L × (B, H, N, N): R_A^l, the LRP relevance of each attention
    gradients: list[Tensor]  # L × (B, H, N, N): G_l = ∂y_c/∂A_l
    grid: tuple[int, int]
    num_prefix_tokens: int
    probe_relevance: Tensor | None = None  # (B, H, N) R_p of an attention pool's probe (0 on
    # the prefix tokens a pool doesn't read); None without one
    probe_gradient: Tensor | None = None  # (B, H, N) G_p = ∂y_c/∂a of the probe's attention


# -- forward pass with the intermediates ----------------------------------------------------------


def _attention(
    module: nn.Module, x: Tensor, rope: Rope, grid: tuple[int, int]
) -> tuple[Tensor, ...]:
    """vitviz's Attention over a ``grid`` of patches, explicit softmax: q and k before and
    after the rotary turn, v (B, H, N, hd; k and v with the kv heads under grouped-query
    attention), attn (B, H, N, N) and the heads' output as proj reads it, ctx (B, N, H·hd)."""
    B, N, _ = x.shape
    q_in, k_in, v = module.project(x)  # (B, H, N, hd), k and v (B, H_kv, N, hd)
    q_in, k_in = module.q_norm(q_in), module.k_norm(k_in)  # qk-norm: relevance unchanged
    q, k = apply_rotary(q_in, k_in, rope, module.prefix, module.rope_half)
    scores = (q * module.scale) @ module.shared(k).transpose(-2, -1)  # (B, H, N, N)
    bias = module.position_bias(N, grid)  # a relative position bias: the rules ignore it
    attn = (scores if bias is None else scores + bias).softmax(dim=-1)
    ctx = module.norm((attn @ module.shared(v)).transpose(1, 2).reshape(B, N, module.attn_dim))
    return q_in, k_in, q, k, v, attn, ctx


def _parallel_block(block: ParallelBlock, x: Tensor) -> tuple[Tensor, _BlockTrace]:
    """A parallel block, eval mode, with its trace: ``attn_in`` = ``mlp_in`` = in_norm(x),
    ``res2`` the attention's projected output and ``branch2`` the MLP's (the two summands of
    y), ``branch1`` = ls(y)."""
    h, m, q, k, v = block.project(x)
    B, H, N, hd = q.shape
    attn = ((q * block.scale) @ k.transpose(-2, -1)).softmax(dim=-1)
    ctx = (attn @ v).transpose(1, 2).reshape(B, N, H * hd)
    a_out = block.attn_out_proj(ctx)
    hidden = block.mlp_act(m)
    m_out = block.mlp_out_proj(hidden)
    branch = block.ls(a_out + m_out)
    trace = _BlockTrace(x, branch, h, q, k, q, k, v, attn, ctx, a_out, m_out, h, hidden)
    return x + branch, trace


def _branched_block(block: BranchedBlock, x: Tensor) -> tuple[Tensor, _BranchedTrace]:
    """A block of several branches, eval mode, with its trace; the attention of every
    branch's heads at once, as the block computes it."""
    attn_in, q, k, v = block.joint_qkv(x)
    first = block.attns[0].attn
    attn = ((q * first.scale) @ k.transpose(-2, -1)).softmax(dim=-1)  # (B, P·H, N, N)
    B, _, N, _ = q.shape
    chunks = (attn @ v).chunk(len(block.attns), dim=1)
    ctx = [
        b.attn.norm(c.transpose(1, 2).reshape(B, N, b.attn.attn_dim))
        for b, c in zip(block.attns, chunks, strict=True)
    ]
    branch1 = [b.ls(b.attn.proj(c)) for b, c in zip(block.attns, ctx, strict=True)]
    mid = x + torch.stack(branch1).sum(dim=0)
    mlp_in = [f.norm(mid) for f in block.ffns]
    mlps = [_mlp(f.mlp, m) for f, m in zip(block.ffns, mlp_in, strict=True)]
    branch2 = [f.ls(m[0]) for f, m in zip(block.ffns, mlps, strict=True)]
    out = mid + torch.stack(branch2).sum(dim=0)
    hidden = [m[1] for m in mlps]
    trace = _BranchedTrace(x, attn_in, q, k, v, attn, ctx, branch1, mid, mlp_in, hidden, branch2)
    return out, trace


def _mlp(mlp: nn.Module, x: Tensor) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
    """The MLP (GELU-like or SwiGLU), eval mode: its output, fc2's input and SwiGLU's two
    factors (None for a plain MLP)."""
    if isinstance(mlp, SwiGLU):
        pre, up = mlp.projections(x)  # the model's own products (one when packed)
        gate = F.silu(pre)
        hidden = mlp.norm(gate * up)
        return mlp.fc2(hidden), hidden, gate, up
    hidden = mlp.norm(mlp.act(mlp.fc1(x)))
    return mlp.fc2(hidden), hidden, None, None


def _block(
    block: nn.Module, x: Tensor, rope: Rope, grid: tuple[int, int]
) -> tuple[Tensor, _BlockTrace]:
    """One encoder block (pre-norm, post-norm, residual post-norm or parallel) over a ``grid``
    of patches, eval mode, with its trace."""
    if isinstance(block, ParallelBlock):
        return _parallel_block(block, x)
    if isinstance(block, BranchedBlock):
        return _branched_block(block, x)  # type: ignore[return-value]
    pre_norm = block.norm_first and not block.res_post_norm
    attn_in = block.norm1(x) if pre_norm else x
    q_in, k_in, q, k, v, attn, ctx = _attention(block.attn, attn_in, rope, grid)
    y = block.attn.proj(ctx)
    branch1 = block.ls1(block.norm1(y) if block.res_post_norm else y)
    mid = x + branch1
    mid_out = mid if block.norm_first or block.res_post_norm else block.norm1(mid)
    mlp_in = block.norm2(mid) if pre_norm else mid_out
    m, hidden, gate, up = _mlp(block.mlp, mlp_in)
    branch2 = block.ls2(block.norm2(m) if block.res_post_norm else m)
    out = mid_out + branch2
    if not block.norm_first and not block.res_post_norm:
        out = block.norm2(out)
    trace = _BlockTrace(
        x, branch1, attn_in, q_in, k_in, q, k, v, attn, ctx, mid_out, branch2, mlp_in, hidden,
        rope, gate, up, block.attn.groups,
    )  # fmt: skip
    return out, trace


def _pool(pool: nn.Module, tokens: Tensor) -> tuple[Tensor, _PoolTrace]:
    """The attention pool (``AttentionPool.attend``) written out: (B, N', D) -> (B, D)."""
    B, N, D = tokens.shape
    H = pool.heads
    wq, wk, wv = pool.in_proj_weight.chunk(3)
    bq, bk, bv = pool.in_proj_bias.chunk(3)
    q = F.linear(pool.probe, wq, bq).reshape(1, H, 1, D // H)
    k = F.linear(tokens, wk, bk).reshape(B, N, H, D // H).transpose(1, 2)  # (B, H, N', hd)
    v = F.linear(tokens, wv, bv).reshape(B, N, H, D // H).transpose(1, 2)
    attn = ((q * (D // H) ** -0.5) @ k.transpose(-2, -1)).softmax(dim=-1)  # (B, H, 1, N')
    ctx = (attn @ v).reshape(B, D)
    h = pool.out_proj(ctx)
    mlp_in = pool.norm(h)
    hidden = pool.act(pool.fc1(mlp_in))
    mlp_out = pool.fc2(hidden)
    return h + mlp_out, _PoolTrace(tokens, q, k, v, attn, ctx, h, mlp_in, hidden, mlp_out)


def _forward(model: nn.Module, x: Tensor) -> _Trace:
    """The model's forward pass, written out so every relevance rule sees its inputs."""
    tokens, grid = model.embed(x)
    trace = _Trace(logits=tokens.new_empty(0), grid=grid)
    rotary = getattr(model, "rope", None)
    ropes = rotary.tables(grid, tokens) if rotary is not None else [None] * len(model.blocks)
    for block, rope in zip(model.blocks, ropes, strict=True):
        tokens, bt = _block(block, tokens, rope, grid)
        trace.blocks.append(bt)
    tokens = model.norm(tokens)
    trace.tokens = tokens
    if getattr(model, "pool", None) is not None:
        pooled, trace.pool = _pool(model.pool, model.pool_input(tokens))
    else:
        pooled = model.pool_tokens(tokens)
    trace.pooled = pooled
    h = model.fc_norm(pooled)
    if isinstance(model.pre_logits, nn.Sequential):
        trace.pre_in = h
        h = model.pre_logits(h)
    trace.head_in = h
    logits = model.head(h)
    if model.head_dist is not None:
        trace.dist_in = tokens[:, 1]
        trace.head_out = logits
        trace.dist_out = model.head_dist(tokens[:, 1])
        logits = (logits + trace.dist_out) / 2
    trace.logits = logits
    return trace


# -- relevance rules ------------------------------------------------------------------------------


def safe_divide(a: Tensor, b: Tensor) -> Tensor:
    """a / (b + ε), and 0 where b = 0 (the stabiliser of the authors' code)."""
    den = b + EPS
    den = torch.where(den == 0, torch.full_like(den, EPS), den)
    return torch.where(b != 0, a / den, torch.zeros_like(den))


def linear_rule(x: Tensor, weight: Tensor, r: Tensor) -> Tensor:
    """α = 1, β = 0 rule through y = x·Wᵀ (+ b): (..., in), (out, in), (..., out) -> (..., in)."""
    wp, wn = weight.clamp(min=0), weight.clamp(max=0)
    xp, xn = x.clamp(min=0), x.clamp(max=0)
    s = safe_divide(r, xp @ wp.T + xn @ wn.T)
    return xp * (s @ wp) + xn * (s @ wn)


def _sum(t: Tensor) -> Tensor:
    """Per-sample sum, shaped to broadcast: (B, ...) -> (B, 1, ...)."""
    return t.flatten(1).sum(dim=1).reshape(-1, *([1] * (t.ndim - 1)))


def add_rule(a: Tensor, b: Tensor, r: Tensor) -> tuple[Tensor, Tensor]:
    """Relevance of z = a + b split to a and b, each rescaled to its share of ΣR (per sample)."""
    s = safe_divide(r, a + b)
    ra, rb = a * s, b * s
    sa, sb, total = _sum(ra), _sum(rb), _sum(r)
    fa = safe_divide(sa.abs(), sa.abs() + sb.abs()) * total
    fb = safe_divide(sb.abs(), sa.abs() + sb.abs()) * total
    return ra * safe_divide(fa, sa), rb * safe_divide(fb, sb)


def fork_rule(x: Tensor, r1: Tensor, r2: Tensor) -> Tensor:
    """Relevance of x used twice (residual and branch): x ⊙ (r1/x + r2/x)."""
    return x * (safe_divide(r1, x) + safe_divide(r2, x))


def sum_rule(terms: list[Tensor], r: Tensor) -> list[Tensor]:
    """Relevance of z = Σ_i t_i split to each term by the z rule, each rescaled to its share
    |ΣR_i| / Σ_j |ΣR_j| of ΣR (per sample); for two terms, ``add_rule``."""
    s = safe_divide(r, torch.stack(terms).sum(dim=0))
    parts = [t * s for t in terms]
    sums = [_sum(p) for p in parts]
    every, total = torch.stack([q.abs() for q in sums]).sum(dim=0), _sum(r)
    return [
        p * safe_divide(safe_divide(q.abs(), every) * total, q)
        for p, q in zip(parts, sums, strict=True)
    ]


def fork_sum_rule(x: Tensor, rs: list[Tensor]) -> Tensor:
    """Relevance of x used by several consumers: x ⊙ Σ_j (r_j / x); for two, ``fork_rule``."""
    return x * torch.stack([safe_divide(r, x) for r in rs]).sum(dim=0)


def matmul_rule(a: Tensor, b: Tensor, r: Tensor) -> tuple[Tensor, Tensor]:
    """z rule through z = a @ b to both operands, each halved: (.., n, m), (.., m, p)."""
    s = safe_divide(r, a @ b)
    return a * (s @ b.transpose(-2, -1)) / 2, b * (a.transpose(-2, -1) @ s) / 2


def product_rule(a: Tensor, b: Tensor, r: Tensor) -> tuple[Tensor, Tensor]:
    """z rule through the elementwise z = a ⊙ b to both factors, each halved (same shapes)."""
    half = a * b * safe_divide(r, a * b) / 2
    return half, half


def rotary_rule(x: Tensor, z: Tensor, rope: Rope, prefix: int, half: bool, r: Tensor) -> Tensor:
    """z rule through the rotary turn z = x·cos + x̃·sin of the patch tokens (a linear map per
    token, no bias): R_x = x ⊙ Jᵀ(R / z), Jᵀ the turn by the opposite angles. x, z, r
    (B, H, N, hd); the prefix tokens' relevance passes unchanged."""
    if rope is None:
        return r
    sin, cos = rope
    s = safe_divide(r[:, :, prefix:], z[:, :, prefix:])
    back = x[:, :, prefix:] * rotate(s, -sin, cos, half)
    return torch.cat([r[:, :, :prefix], back], dim=2)


def _mlp_relprop(mlp: nn.Module, bt: _BlockTrace, r: Tensor) -> Tensor:
    """Relevance at the MLP's output (B, N, D) -> at its input (sub-LN, activation: unchanged)."""
    r_hidden = linear_rule(bt.hidden, mlp.fc2.weight, r)
    if bt.gate is None or bt.up is None:
        return linear_rule(bt.mlp_in, mlp.fc1.weight, r_hidden)
    r_gate, r_up = product_rule(bt.gate, bt.up, r_hidden)
    r_g = linear_rule(bt.mlp_in, mlp.fc1_g.weight, r_gate)
    return fork_rule(bt.mlp_in, r_g, linear_rule(bt.mlp_in, mlp.fc1_x.weight, r_up))


def _qkv_relprop(
    bt: _BlockTrace, proj: Tensor, r_out: Tensor, prefix: int = 0, half: bool = False
) -> tuple[Tensor, Tensor]:
    """Relevance at the attention's projected output (B, N, D), ``proj`` its weight -> (at
    q, k, v as the qkv Linear gives them, (B, N, (H + 2·H_kv)·hd); R_A (B, H, N, N)).
    Grouped-query attention: a kv head's k and v feed ``groups`` query heads, a fork: by the
    fork rule x ⊙ Σ_j (R_j / x) over its query heads j."""
    B, H, N, hd = bt.q.shape
    g = bt.groups

    def shared(t: Tensor) -> Tensor:  # (B, H_kv, N, hd) -> (B, H, N, hd)
        return t if g == 1 else t.repeat_interleave(g, dim=1)

    def fork(x: Tensor, r: Tensor) -> Tensor:  # x (B, H_kv, N, hd), r (B, H, N, hd) -> as x
        if g == 1:
            return r
        return x * safe_divide(r, shared(x)).reshape(B, H // g, g, N, hd).sum(dim=2)

    r_ctx = linear_rule(bt.ctx, proj, r_out)  # the sub-LN: unchanged
    r_ctx = r_ctx.reshape(B, N, H, hd).transpose(1, 2)  # (B, H, N, hd)
    r_attn, r_v = matmul_rule(bt.attn, shared(bt.v), r_ctx)
    r_q, r_kt = matmul_rule(bt.q, shared(bt.k).transpose(-2, -1), r_attn)  # softmax, bias
    r_q = rotary_rule(bt.q_in, bt.q, bt.rope, prefix, half, r_q)  # qk-norm: unchanged
    r_k = rotary_rule(bt.k_in, bt.k, bt.rope, prefix, half, fork(bt.k, r_kt.transpose(-2, -1)))
    flat = [t.transpose(1, 2).reshape(B, N, -1) for t in (r_q, r_k, fork(bt.v, r_v))]
    return torch.cat(flat, dim=-1), r_attn


def _parallel_relprop(block: ParallelBlock, bt: _BlockTrace, r: Tensor) -> tuple[Tensor, Tensor]:
    """A parallel block: the residual add, then y = a + m by the add rule, each branch to the
    fused in-projection's outputs ([MLP hidden, q, k, v]), which the z⁺ rule takes to the
    norm's output at once (its fork), the norm unchanged, the fork at x."""
    r_res, r_branch = add_rule(bt.res1, bt.branch1, r)  # LayerScale: unchanged
    r_a, r_m = add_rule(bt.res2, bt.branch2, r_branch)
    r_qkv, r_attn = _qkv_relprop(bt, block.attn_out_proj.weight, r_a)
    r_hidden = linear_rule(bt.hidden, block.mlp_out_proj.weight, r_m)  # activation: unchanged
    r_in = linear_rule(bt.attn_in, block.in_proj.weight, torch.cat([r_hidden, r_qkv], dim=-1))
    return fork_rule(bt.res1, r_res, r_in), r_attn


def _branched_relprop(block: BranchedBlock, bt: _BranchedTrace, r: Tensor) -> tuple[Tensor, Tensor]:
    """A block of several branches: the MLP half (the residual add, the branches' sum, each
    MLP, the fork at its input), then the attention half the same way, its heads' relevances
    side by side (B, P·H, N, N) as the joint attention is."""
    r_res2, r_sum2 = add_rule(bt.res2, torch.stack(bt.branch2).sum(dim=0), r)
    into_mid = [r_res2]
    for f, r_m, hidden, mlp_in in zip(
        block.ffns, sum_rule(bt.branch2, r_sum2), bt.hidden, bt.mlp_in, strict=True
    ):  # LayerScale, sub-LN, activation, norm: unchanged
        r_hidden = linear_rule(hidden, f.mlp.fc2.weight, r_m)
        into_mid.append(linear_rule(mlp_in, f.mlp.fc1.weight, r_hidden))
    r = fork_sum_rule(bt.res2, into_mid)
    r_res1, r_sum1 = add_rule(bt.res1, torch.stack(bt.branch1).sum(dim=0), r)
    B, _, N, hd = bt.v.shape
    r_ctx = [
        linear_rule(c, b.attn.proj.weight, r_b).reshape(B, N, -1, hd).transpose(1, 2)
        for b, c, r_b in zip(block.attns, bt.ctx, sum_rule(bt.branch1, r_sum1), strict=True)
    ]  # each (B, H, N, hd)
    r_attn, r_v = matmul_rule(bt.attn, bt.v, torch.cat(r_ctx, dim=1))
    r_q, r_kt = matmul_rule(bt.q, bt.k.transpose(-2, -1), r_attn)  # softmax, qk-norm: unchanged
    r_qkv = torch.stack([r_q, r_kt.transpose(-2, -1), r_v])  # (3, B, P·H, N, hd)
    into_x = [r_res1]
    P = len(block.attns)
    for b, part, attn_in in zip(block.attns, r_qkv.chunk(P, dim=2), bt.attn_in, strict=True):
        packed = part.permute(1, 3, 0, 2, 4).reshape(B, N, -1)  # (B, N, 3·H·hd) as qkv's
        into_x.append(linear_rule(attn_in, b.attn.qkv.weight, packed))
    return fork_sum_rule(bt.res1, into_x), r_attn


def _block_relprop(block: nn.Module, bt: _BlockTrace, r: Tensor) -> tuple[Tensor, Tensor]:
    """Relevance at the block's output (B, N, D) -> (at its input, R_A (B, H, N, N))."""
    if isinstance(block, ParallelBlock):
        return _parallel_relprop(block, bt, r)
    if isinstance(block, BranchedBlock):
        return _branched_relprop(block, bt, r)  # type: ignore[arg-type]
    # norm2 (post-norm, residual post-norm) / LayerScale / dropout: relevance passes unchanged
    r_res2, r_branch2 = add_rule(bt.res2, bt.branch2, r)
    r = fork_rule(bt.res2, r_res2, _mlp_relprop(block.mlp, bt, r_branch2))
    r_res1, r_branch1 = add_rule(bt.res1, bt.branch1, r)
    a = block.attn
    r_qkv, r_attn = _qkv_relprop(bt, a.proj.weight, r_branch1, a.prefix, a.rope_half)
    r_attn_in = linear_rule(bt.attn_in, a.qkv.weight, r_qkv)
    return fork_rule(bt.res1, r_res1, r_attn_in), r_attn


def _pool_relprop(pool: nn.Module, pt: _PoolTrace, r: Tensor) -> tuple[Tensor, Tensor]:
    """Relevance at the pooled feature (B, D) -> (at the tokens the pool read (B, N', D), the
    probe attention's R_p (B, H, N')). The probe's own share of q·Kᵀ stays with the probe."""
    r_h, r_mlp = add_rule(pt.h, pt.mlp_out, r)
    r_hidden = linear_rule(pt.hidden, pool.fc2.weight, r_mlp)
    r_h = fork_rule(pt.h, r_h, linear_rule(pt.mlp_in, pool.fc1.weight, r_hidden))
    B, H, N, hd = pt.v.shape
    r_ctx = linear_rule(pt.ctx, pool.out_proj.weight, r_h).reshape(B, H, 1, hd)
    r_attn, r_v = matmul_rule(pt.attn, pt.v, r_ctx)
    _, r_kt = matmul_rule(pt.q.expand(B, -1, -1, -1), pt.k.transpose(-2, -1), r_attn)
    r_kv = torch.stack([r_kt.transpose(-2, -1), r_v]).permute(1, 3, 0, 2, 4)  # (B, N', 2, H, hd)
    r_kv = r_kv.reshape(B, N, 2 * H * hd)
    weight = pool.in_proj_weight[H * hd :]  # the k and v rows
    return linear_rule(pt.tokens, weight, r_kv), r_attn[:, :, 0]


def _head_relprop(
    model: nn.Module, trace: _Trace, r_logits: Tensor
) -> tuple[Tensor, Tensor | None]:
    """Relevance of the logits (B, C) -> of the final tokens (B, N, D), and an attention pool's
    probe relevance R_p (B, H, N) (None without one)."""
    assert trace.tokens is not None and trace.pooled is not None and trace.head_in is not None
    tokens = trace.tokens
    r_tokens = torch.zeros_like(tokens)
    if model.head_dist is not None:
        assert trace.head_out is not None and trace.dist_out is not None
        r_logits, r_dist = add_rule(trace.head_out, trace.dist_out, r_logits)  # (a + b)/2
        r_dist_in = linear_rule(trace.dist_in, model.head_dist.weight, r_dist)
        r_tokens[:, 1] = tokens[:, 1] * safe_divide(r_dist_in, tokens[:, 1])
    own_rule = getattr(model.head, "relevance", None)  # a head that is not a Linear
    if own_rule is not None:
        r_z, weight = own_rule(trace.head_in, r_logits)  # at a bias-free Linear's output
        r = r_z if weight is None else linear_rule(trace.head_in, weight, r_z)
    else:
        r = linear_rule(trace.head_in, model.head.weight, r_logits)
    if trace.pre_in is not None:  # pre-logits Linear + tanh (tanh: unchanged)
        r = linear_rule(trace.pre_in, model.pre_logits[0].weight, r)
    # fc_norm: unchanged; the pooling: z rule (token_avg: the first D features are CLS's, the
    # last D the mean's, each passed on by its own rule); an attention pool: its own rules
    cfg = model.config
    D = tokens.shape[-1]
    start = 0 if cfg.pool_include_prefix else model.num_prefix_tokens
    if trace.pool is not None:
        r_in, r_probe = _pool_relprop(model.pool, trace.pool, r)
        r_tokens[:, start:] = r_tokens[:, start:] + r_in
        probe = r_probe.new_zeros(*r_probe.shape[:2], tokens.shape[1])
        probe[:, :, start:] = r_probe
        return r_tokens, probe
    r_cls, r_mean = (r[:, :D], r[:, D:]) if cfg.global_pool == "token_avg" else (r, r)
    if cfg.global_pool in ("avg", "token_avg"):
        n = tokens.shape[1] - start
        mean = trace.pooled[:, -D:]
        s = safe_divide(r_mean, mean)[:, None] / n
        r_tokens[:, start:] = r_tokens[:, start:] + tokens[:, start:] * s
    if cfg.global_pool in ("token", "token_avg"):
        r_tokens[:, 0] = r_tokens[:, 0] + tokens[:, 0] * safe_divide(r_cls, tokens[:, 0])
    return r_tokens, None  # the final norm: unchanged


def _probe_gradient(trace: _Trace, grad: Tensor, n: int, start: int) -> Tensor:
    """(B, H, 1, N') gradient of the probe's attention -> (B, H, N), 0 before ``start``."""
    out = grad.new_zeros(grad.shape[0], grad.shape[1], n)
    out[:, :, start:] = grad[:, :, 0]
    return out


def require_classifier_in_eval(model: nn.Module) -> None:
    """ValueError (one line) for a model without a classification head or in training mode:
    what every kind's transformer attribution asks first."""
    if model.config.num_classes == 0:
        raise ValueError("this model has no classification head: transformer attribution needs one")
    if model.training:
        raise ValueError("put the model in eval mode (model.eval()) for transformer attribution")


def one_hot_relevance(logits: Tensor, c: Tensor) -> Tensor:
    """(B, C) logits, (B,) classes -> the relevance the propagation starts from: 1 at c."""
    r = torch.zeros_like(logits)
    r.scatter_(1, c[:, None], 1.0)
    return r


def attention_relevance(
    model: nn.Module, x: Tensor, target: int | Tensor | None = None
) -> AttributionResult:
    """R_A^l and G_l of every block for class ``target`` (None: each image's top class), and
    an attention pool's R_p and G_p.

    x: (B, C, H, W) on the model's device. One forward pass with autograd (for G_l), one
    backward pass for the gradients and one relevance pass; all on the model's device.
    """
    blocks = getattr(model, "blocks", None)
    if blocks is None or not hasattr(model, "embed"):
        raise ValueError("transformer attribution needs vitviz's own ViT (its blocks and head)")
    require_classifier_in_eval(model)
    with torch.enable_grad():
        x = x.detach().requires_grad_(True)
        trace = _forward(model, x)
        c = target_classes(trace.logits, target)
        y = trace.logits.gather(1, c[:, None]).sum()
        pool = [] if trace.pool is None else [trace.pool.attn]
        grads = list(torch.autograd.grad(y, [bt.attn for bt in trace.blocks] + pool))
        g_pool = grads.pop() if pool else None
    with torch.no_grad():  # the graph is spent; the trace's tensors are only read from here
        r_logits = one_hot_relevance(trace.logits, c)
        r, probe = _head_relprop(model, trace, r_logits)
        relevances: list[Tensor] = []
        for block, bt in zip(reversed(model.blocks), reversed(trace.blocks), strict=True):
            r, r_attn = _block_relprop(block, bt, r)
            relevances.append(r_attn)
    relevances.reverse()
    probe_gradient = None
    if g_pool is not None:
        assert trace.tokens is not None
        start = 0 if model.config.pool_include_prefix else model.num_prefix_tokens
        probe_gradient = _probe_gradient(trace, g_pool.detach(), trace.tokens.shape[1], start)
    return AttributionResult(
        logits=trace.logits.detach(),
        target=c,
        relevances=relevances,
        gradients=[g.detach() for g in grads],
        grid=trace.grid,
        num_prefix_tokens=model.num_prefix_tokens,
        probe_relevance=probe,
        probe_gradient=probe_gradient,
    )


def attribution_map(
    res: AttributionResult, patch: tuple[int, int] | None = None, start_layer: int = 0
) -> Tensor:
    """The map of ``attention_relevance``'s result, min-max scaled: (B, gh, gw). Row q of
    R = (I + Ā_L) ⋯ (I + Ā_s), q the token of ``patch`` (row, col), else CLS (the mean of
    the patch queries without prefix tokens); an attention pool's probe row s·R without a
    patch, s = mean_h((G_p ⊙ R_p)⁺)."""
    if patch is None and res.probe_relevance is not None and res.probe_gradient is not None:
        s = (res.probe_gradient * res.probe_relevance).clamp_min(0).mean(dim=1)  # (B, N)
        return relevance(
            res.relevances, res.gradients, res.grid, res.num_prefix_tokens, None, start_layer, s
        )
    q = query_token(patch, res.grid, res.num_prefix_tokens)
    return relevance(res.relevances, res.gradients, res.grid, res.num_prefix_tokens, q, start_layer)


def transformer_attribution(
    model: nn.Module,
    x: Tensor,
    target: int | Tensor | None = None,
    start_layer: int = 0,
    patch: tuple[int, int] | None = None,
) -> Tensor:
    """Transformer Attribution map, min-max scaled: (B, C, H, W) -> (B, gh, gw).

    R[q, patches], q CLS (or the mean of the patch queries for a model without prefix
    tokens), or the token of ``patch`` (row, col) when given; an attention pool's probe row
    without a patch (``attribution_map``).
    """
    return attribution_map(attention_relevance(model, x, target), patch, start_layer)
