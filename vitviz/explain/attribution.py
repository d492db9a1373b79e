"""Transformer Attribution (Chefer, Gur & Wolf, CVPR 2021) on vitviz's own ViT.

LRP relevance with the α = 1, β = 0 rule is propagated from the class logit down through the
head, the final norm and every block to each block's attention map, giving R_A^l (B, H, N, N).
With G_l = ∂y_c/∂A_l: Ā_l = mean_h((G_l ⊙ R_A^l)⁺); R = I; R = R + Ā_l·R for l = s..L;
the map is R[q, patches] (q = CLS), min-max scaled.

The rules are those of the authors' public code, written here in closed form on the model's
own weights (nothing in ``vitviz.model`` changes):

- Linear: z⁺ rule, R_in = x⁺ ⊙ (S·W⁺) + x⁻ ⊙ (S·W⁻), S = R / (x⁺W⁺ᵀ + x⁻W⁻ᵀ) (bias ignored);
- LayerNorm, GELU (any activation), softmax, dropout, LayerScale: relevance passes unchanged;
- A·V and Q·Kᵀ: z rule to both operands, each halved;
- residual add: z rule to both inputs, then each rescaled so their sums keep the ratio
  |Σa| : |Σb| and together hold ΣR; the fork before a branch: the two relevances added.

A head that is not a Linear gives its own first step (``head.relevance(x, r)``, x (B, D) the
head's input, r (B, C) the one-hot relevance of the class) as the relevance at the output of a
bias-free Linear over x and that Linear's weight, from which the z⁺ rule goes on. A CLIP's
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
from torch import Tensor, nn

from vitviz.explain.rollout import relevance
from vitviz.explain.targets import target_classes
from vitviz.explain.tokens import query_token

EPS = 1e-9


@dataclass
class _BlockTrace:
    """What one block's relevance propagation needs from the forward pass (no batch dropped)."""

    res1: Tensor  # (B, N, D) residual input of the attention add; also the fork's input
    branch1: Tensor  # (B, N, D) attention branch output (after LayerScale)
    attn_in: Tensor  # (B, N, D) input of qkv
    q: Tensor  # (B, H, N, hd), unscaled
    k: Tensor
    v: Tensor
    attn: Tensor  # (B, H, N, N), part of the autograd graph
    ctx: Tensor  # (B, N, heads·hd) input of proj
    res2: Tensor  # (B, N, D) residual input of the MLP add; also the fork's input
    branch2: Tensor  # (B, N, D) MLP branch output (after LayerScale)
    mlp_in: Tensor  # (B, N, D) input of fc1
    hidden: Tensor  # (B, N, hidden) input of fc2 (after the activation)


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
    grid: tuple[int, int] = (0, 0)


@dataclass
class AttributionResult:
    logits: Tensor  # (B, C) detached
    target: Tensor  # (B,) long
    relevances: list[Tensor]  # L × (B, H, N, N): R_A^l, the LRP relevance of each attention
    gradients: list[Tensor]  # L × (B, H, N, N): G_l = ∂y_c/∂A_l
    grid: tuple[int, int]
    num_prefix_tokens: int


# -- forward pass with the intermediates ----------------------------------------------------------


def _attention(module: nn.Module, x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """vitviz's Attention, explicit softmax: q, k, v (B, H, N, hd), attn (B, H, N, N) and the
    heads' output before proj, ctx (B, N, H·hd)."""
    B, N, _ = x.shape
    heads, hd = module.heads, module.head_dim
    qkv = module.qkv(x).reshape(B, N, 3, heads, hd).permute(2, 0, 3, 1, 4)
    q, k, v = qkv.unbind(0)  # each (B, H, N, hd)
    scores = (q * module.scale) @ k.transpose(-2, -1)  # (B, H, N, N)
    bias = module.position_bias(N)  # BEiT's relative position bias (LRP refused on it)
    attn = (scores if bias is None else scores + bias).softmax(dim=-1)
    ctx = (attn @ v).transpose(1, 2).reshape(B, N, heads * hd)
    return q, k, v, attn, ctx


def _block(block: nn.Module, x: Tensor) -> tuple[Tensor, _BlockTrace]:
    """One encoder block (pre- or post-norm), eval mode, with its trace."""
    attn_in = block.norm1(x) if block.norm_first else x
    q, k, v, attn, ctx = _attention(block.attn, attn_in)
    branch1 = block.ls1(block.attn.proj(ctx))
    mid = x + branch1
    if not block.norm_first:
        mid_out = block.norm1(mid)
        mlp_in = mid_out
    else:
        mid_out = mid
        mlp_in = block.norm2(mid)
    mlp = block.mlp
    hidden = mlp.act(mlp.fc1(mlp_in))
    branch2 = block.ls2(mlp.fc2(hidden))
    out = mid_out + branch2
    if not block.norm_first:
        out = block.norm2(out)
    trace = _BlockTrace(x, branch1, attn_in, q, k, v, attn, ctx, mid_out, branch2, mlp_in, hidden)
    return out, trace


def _forward(model: nn.Module, x: Tensor) -> _Trace:
    """The model's forward pass, written out so every relevance rule sees its inputs."""
    tokens, grid = model.embed(x)
    trace = _Trace(logits=tokens.new_empty(0), grid=grid)
    for block in model.blocks:
        tokens, bt = _block(block, tokens)
        trace.blocks.append(bt)
    tokens = model.norm(tokens)
    trace.tokens = tokens
    trace.pooled = pooled = model.pool_tokens(tokens)
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


def matmul_rule(a: Tensor, b: Tensor, r: Tensor) -> tuple[Tensor, Tensor]:
    """z rule through z = a @ b to both operands, each halved: (.., n, m), (.., m, p)."""
    s = safe_divide(r, a @ b)
    return a * (s @ b.transpose(-2, -1)) / 2, b * (a.transpose(-2, -1) @ s) / 2


def _block_relprop(block: nn.Module, bt: _BlockTrace, r: Tensor) -> tuple[Tensor, Tensor]:
    """Relevance at the block's output (B, N, D) -> (at its input, R_A (B, H, N, N))."""
    # norm2 (post-norm) / LayerScale / activation / dropout: relevance passes unchanged
    r_res2, r_branch2 = add_rule(bt.res2, bt.branch2, r)
    mlp = block.mlp
    r_hidden = linear_rule(bt.hidden, mlp.fc2.weight, r_branch2)
    r_mlp_in = linear_rule(bt.mlp_in, mlp.fc1.weight, r_hidden)
    r = fork_rule(bt.res2, r_res2, r_mlp_in)
    r_res1, r_branch1 = add_rule(bt.res1, bt.branch1, r)
    B, H, N, hd = bt.v.shape
    r_ctx = linear_rule(bt.ctx, block.attn.proj.weight, r_branch1)
    r_ctx = r_ctx.reshape(B, N, H, hd).transpose(1, 2)  # (B, H, N, hd)
    r_attn, r_v = matmul_rule(bt.attn, bt.v, r_ctx)
    r_q, r_kt = matmul_rule(bt.q, bt.k.transpose(-2, -1), r_attn)  # softmax: unchanged
    r_k = r_kt.transpose(-2, -1)
    r_qkv = torch.stack([r_q, r_k, r_v]).permute(1, 3, 0, 2, 4).reshape(B, N, 3 * H * hd)
    r_attn_in = linear_rule(bt.attn_in, block.attn.qkv.weight, r_qkv)
    return fork_rule(bt.res1, r_res1, r_attn_in), r_attn


def _head_relprop(model: nn.Module, trace: _Trace, r_logits: Tensor) -> Tensor:
    """Relevance of the logits (B, C) -> of the final tokens (B, N, D)."""
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
        r = linear_rule(trace.head_in, weight, r_z)
    else:
        r = linear_rule(trace.head_in, model.head.weight, r_logits)
    if trace.pre_in is not None:  # pre-logits Linear + tanh (tanh: unchanged)
        r = linear_rule(trace.pre_in, model.pre_logits[0].weight, r)
    # fc_norm: unchanged; the pooling: z rule (token_avg: the first D features are CLS's, the
    # last D the mean's, each passed on by its own rule)
    cfg = model.config
    D = tokens.shape[-1]
    r_cls, r_mean = (r[:, :D], r[:, D:]) if cfg.global_pool == "token_avg" else (r, r)
    if cfg.global_pool in ("avg", "token_avg"):
        start = 0 if cfg.pool_include_prefix else model.num_prefix_tokens
        n = tokens.shape[1] - start
        mean = trace.pooled[:, -D:]
        s = safe_divide(r_mean, mean)[:, None] / n
        r_tokens[:, start:] = r_tokens[:, start:] + tokens[:, start:] * s
    if cfg.global_pool in ("token", "token_avg"):
        r_tokens[:, 0] = r_tokens[:, 0] + tokens[:, 0] * safe_divide(r_cls, tokens[:, 0])
    return r_tokens  # the final norm: unchanged


def attention_relevance(
    model: nn.Module, x: Tensor, target: int | Tensor | None = None
) -> AttributionResult:
    """R_A^l and G_l of every block for class ``target`` (None: each image's top class).

    x: (B, C, H, W) on the model's device. One forward pass with autograd (for G_l), one
    backward pass for the gradients and one relevance pass; all on the model's device.
    """
    blocks = getattr(model, "blocks", None)
    if blocks is None or not hasattr(model, "embed"):
        raise ValueError("transformer attribution needs vitviz's own ViT (its blocks and head)")
    if model.config.num_classes == 0:
        raise ValueError("this model has no classification head: transformer attribution needs one")
    if model.training:
        raise ValueError("put the model in eval mode (model.eval()) for transformer attribution")
    with torch.enable_grad():
        x = x.detach().requires_grad_(True)
        trace = _forward(model, x)
        c = target_classes(trace.logits, target)
        y = trace.logits.gather(1, c[:, None]).sum()
        grads = torch.autograd.grad(y, [bt.attn for bt in trace.blocks])
    with torch.no_grad():  # the graph is spent; the trace's tensors are only read from here
        r_logits = torch.zeros_like(trace.logits)
        r_logits.scatter_(1, c[:, None], 1.0)
        r = _head_relprop(model, trace, r_logits)
        relevances: list[Tensor] = []
        for block, bt in zip(reversed(model.blocks), reversed(trace.blocks), strict=True):
            r, r_attn = _block_relprop(block, bt, r)
            relevances.append(r_attn)
    relevances.reverse()
    return AttributionResult(
        logits=trace.logits.detach(),
        target=c,
        relevances=relevances,
        gradients=[g.detach() for g in grads],
        grid=trace.grid,
        num_prefix_tokens=model.num_prefix_tokens,
    )


def transformer_attribution(
    model: nn.Module,
    x: Tensor,
    target: int | Tensor | None = None,
    start_layer: int = 0,
    patch: tuple[int, int] | None = None,
) -> Tensor:
    """Transformer Attribution map R[q, patches], min-max scaled: (B, C, H, W) -> (B, gh, gw).

    q is CLS (or the mean of the patch queries for a model without prefix tokens), or the
    token of ``patch`` (row, col) when given.
    """
    res = attention_relevance(model, x, target)
    q = query_token(patch, res.grid, res.num_prefix_tokens)
    return relevance(res.relevances, res.gradients, res.grid, res.num_prefix_tokens, q, start_layer)
