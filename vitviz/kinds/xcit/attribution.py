"""Transformer Attribution (Chefer, Gur & Wolf, CVPR 2021) on vitviz's XCiT, by the ViT's rules.

An XCiT's token maps are its class-attention blocks' CLS rows (``vitviz.kinds.xcit``), so the
map needs R_A^l and G_l of those layers only; their relevance comes from the head down through
the later class-attention blocks, and nothing below the first one (the XCA blocks, the LPI
convolutions, the stem) is on the way. The XCA blocks run with autograd (G_l is a gradient of
the logit, which they don't change) and no relevance is propagated into them.

One class-attention block (timm's ``ClassAttentionBlock``, ``vitviz.kinds.xcit.network``),
x (B, N, D) over [CLS, patches]::

    u = norm1(x)
    y = proj(A·V), A = softmax(q·Kᵀ·scale), q = W_q u_CLS, K = W_k u, V = W_v u   (B, 1, D)
    m = x + γ1 ⊙ [y, u_patches]                         (the patches get their own normed token)
    t = norm2(m)  (tokens_norm)  or  [norm2(m_CLS), m_patches]
    out = t + [γ2 ⊙ mlp(t_CLS), t_patches]              (the patches added to themselves)

(proj reads the CLS's attention output only, as in timm: the patches' part of the branch is u's
own rows.) Its relevance, relevance at ``out`` to relevance at x, with the rule functions of
``vitviz.explain.attribution`` (nothing new):

- out = t + b: ``add_rule`` over all the tokens (the patches' doubling included: each patch's
  relevance split between its two equal copies, then each side rescaled to its |share| of ΣR);
- b = [γ2 ⊙ mlp(t_CLS), t_patches]: LayerScale unchanged, fc2 and fc1 by the z⁺ rule (bias
  ignored), GELU unchanged; t is read by the residual and by the split into its CLS row (the
  MLP's input) and its patch rows: the split's z rule, t ⊙ R/t, and ``fork_rule`` of the two;
- norm2 over every token: unchanged; over the CLS alone: the split of m into [CLS, patches]
  (z rule), norm2 unchanged on the CLS;
- m = x + γ1 ⊙ [y, u_patches]: ``add_rule`` over all the tokens; LayerScale unchanged;
- proj: z⁺ rule; A·V and q·Kᵀ: ``matmul_rule`` (z rule to both operands, each halved); softmax
  unchanged; W_q, W_k, W_v: z⁺ rule; R_A^l is A's relevance, the CLS's row (B, H, 1, N);
- u is read by k, by v and by the split into its CLS row (q's input) and its patch rows (the
  branch's): one ``fork_rule`` of the three (the split's by the z rule), norm1 unchanged;
- x is read by the residual and by norm1: ``fork_rule``.

The head: z⁺ rule at the CLS's final token, the CLS's pick by the z rule, the final norm
unchanged. Below the first class-attention block the CLS is the learnt token and the patches
enter the XCA blocks: the relevance stops there.

R_A^l and G_l = ∂y_c/∂A_l are handed over in the kind's captured layout (B, H, N, N), the CLS's
row at [0], zero elsewhere; the map is then relevance's chain with R_A for A (the ViT's
``attribution_map``): Ā_l = mean_h((G_l ⊙ R_A^l)⁺), R = I, R ← R + Ā_l·R for l = s..L, the CLS's
row over the patches, min-max scaled. A patch has no row in any layer (refused by the kind).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from vitviz.explain.attribution import (
    AttributionResult,
    add_rule,
    attribution_map,
    fork_rule,
    linear_rule,
    matmul_rule,
    require_classifier_in_eval,
    safe_divide,
)
from vitviz.explain.targets import target_classes
from vitviz.kinds.cls_head_relevance import cls_row_layout, head_relevance


@dataclass
class _ClassTrace:
    """One class-attention block's forward, N = 1 + P tokens [CLS, patches]."""

    tokens: Tensor  # (B, N, D) the block's input x: the first residual and norm1's input
    u: Tensor  # (B, N, D) norm1 output: read by q (its CLS row), k, v and the branch (patches)
    q: Tensor  # (B, H, 1, hd) unscaled
    k: Tensor  # (B, H, N, hd)
    v: Tensor
    attn: Tensor  # (B, H, 1, N) the CLS's attention (autograd graph)
    ctx: Tensor  # (B, 1, D) input of proj
    branch1: Tensor  # (B, N, D) γ1 ⊙ [proj(ctx), u_patches]
    mid: Tensor  # (B, N, D) x + branch1: norm2's input
    t: Tensor  # (B, N, D) after norm2: the second residual, the MLP's input (CLS row)
    hidden: Tensor  # (B, 1, hidden) input of fc2
    branch2: Tensor  # (B, N, D) [γ2 ⊙ mlp(t_CLS), t_patches]


@dataclass
class _Trace:
    logits: Tensor  # (B, C)
    blocks: list[_ClassTrace]
    tokens: Tensor  # (B, N, D) after the final norm
    grid: tuple[int, int]


def _class_block(block: nn.Module, x: Tensor) -> tuple[Tensor, _ClassTrace]:
    """An XCiT class-attention block (eval mode): (B, N, D) -> (B, N, D), with its trace."""
    att, mlp = block.attn, block.mlp
    B, N, D = x.shape
    H, hd = att.heads, att.head_dim
    u = block.norm1(x)
    q = att.q(u[:, :1]).reshape(B, 1, H, hd).transpose(1, 2)  # (B, H, 1, hd)
    k = att.k(u).reshape(B, N, H, hd).transpose(1, 2)
    v = att.v(u).reshape(B, N, H, hd).transpose(1, 2)
    attn = ((q * att.scale) @ k.transpose(-2, -1)).softmax(dim=-1)  # (B, H, 1, N)
    ctx = (attn @ v).transpose(1, 2).reshape(B, 1, D)
    branch1 = block.gamma1 * torch.cat([att.proj(ctx), u[:, 1:]], dim=1)
    mid = x + branch1
    if block.tokens_norm:
        t = block.norm2(mid)
    else:
        t = torch.cat([block.norm2(mid[:, :1]), mid[:, 1:]], dim=1)
    hidden = mlp.norm(mlp.act(mlp.fc1(t[:, :1])))
    branch2 = torch.cat([block.gamma2 * mlp.fc2(hidden), t[:, 1:]], dim=1)
    trace = _ClassTrace(x, u, q, k, v, attn, ctx, branch1, mid, t, hidden, branch2)
    return t + branch2, trace


def _forward(model: nn.Module, x: Tensor) -> _Trace:
    """The XCiT's forward pass (eval mode): the XCA blocks as the model runs them, the
    class-attention blocks written out so every rule sees its inputs."""
    p, grid, _ = model.patches(x)  # (B, P, D) after the XCA blocks
    tokens = torch.cat([model.cls_token.expand(p.shape[0], -1, -1), p], dim=1)
    blocks: list[_ClassTrace] = []
    for block in model.blocks:
        tokens, ct = _class_block(block, tokens)
        blocks.append(ct)
    tokens = model.norm(tokens)
    return _Trace(model.head(tokens[:, 0]), blocks, tokens, grid)


def _split(x: Tensor, r: Tensor) -> Tensor:
    """z rule through the split of x (B, N, D) into rows (the CLS, the patches) whose
    relevances r (B, N, D) are assembled in place: x ⊙ r/x."""
    return x * safe_divide(r, x)


def _class_relprop(block: nn.Module, ct: _ClassTrace, r: Tensor) -> tuple[Tensor, Tensor]:
    """Relevance at the block's output (B, N, D) -> (at its input, R_A (B, H, 1, N) of the
    CLS's row); the rules of the module docstring, last operation first."""
    att, mlp = block.attn, block.mlp
    r_t, r_b2 = add_rule(ct.t, ct.branch2, r)
    r_hidden = linear_rule(ct.hidden, mlp.fc2.weight, r_b2[:, :1])  # γ2: unchanged
    r_cls = linear_rule(ct.t[:, :1], mlp.fc1.weight, r_hidden)  # GELU, sub-LN: unchanged
    r_t = fork_rule(ct.t, r_t, _split(ct.t, torch.cat([r_cls, r_b2[:, 1:]], dim=1)))
    r_mid = r_t if block.tokens_norm else _split(ct.mid, r_t)  # norm2: unchanged
    r_x, r_b1 = add_rule(ct.tokens, ct.branch1, r_mid)  # γ1: unchanged
    B, H, _, hd = ct.v.shape
    r_ctx = linear_rule(ct.ctx, att.proj.weight, r_b1[:, :1]).reshape(B, 1, H, hd).transpose(1, 2)
    r_attn, r_v = matmul_rule(ct.attn, ct.v, r_ctx)
    r_q, r_kt = matmul_rule(ct.q, ct.k.transpose(-2, -1), r_attn)  # softmax: unchanged

    def heads_back(a: Tensor) -> Tensor:  # (B, H, T, hd) -> (B, T, D)
        return a.transpose(1, 2).reshape(B, a.shape[2], H * hd)

    r_q_in = linear_rule(ct.u[:, :1], att.q.weight, heads_back(r_q))
    r_u_split = _split(ct.u, torch.cat([r_q_in, r_b1[:, 1:]], dim=1))
    r_u_k = linear_rule(ct.u, att.k.weight, heads_back(r_kt.transpose(-2, -1)))
    r_u_v = linear_rule(ct.u, att.v.weight, heads_back(r_v))
    r_u = fork_rule(ct.u, r_u_split + r_u_k, r_u_v)  # u read three times: added
    return fork_rule(ct.tokens, r_x, r_u), r_attn  # norm1: unchanged


def xcit_relevance(
    model: nn.Module, x: Tensor, target: int | Tensor | None = None
) -> tuple[AttributionResult, Tensor]:
    """R_A^l and G_l of every class-attention layer of vitviz's XCiT for class ``target``
    (None: each image's top class), each L × (B, H, 1 + P, 1 + P) with the CLS's row, and the
    relevance at the class-attention stage's input (B, 1 + P, D): the learnt CLS token's and
    the XCA blocks' output, where no map layer reads it (every rule of the stage leaves its mark
    there, the patches' too, which reach R_A only through the adds' rescaling).

    x: (B, C, H, W) on the model's device. One forward pass with autograd (for G_l), one
    backward pass for the gradients and one relevance pass over the class-attention blocks.
    """
    if getattr(model, "model_kind", None) != "xcit" or not hasattr(model, "patches"):
        raise ValueError("XCiT transformer attribution needs vitviz's own XCiT (its blocks)")
    require_classifier_in_eval(model)
    with torch.enable_grad():
        x = x.detach().requires_grad_(True)
        trace = _forward(model, x)
        c = target_classes(trace.logits, target)
        y = trace.logits.gather(1, c[:, None]).sum()
        grads = torch.autograd.grad(y, [ct.attn for ct in trace.blocks])
    with torch.no_grad():
        r = head_relevance(trace.tokens, model.head.weight, trace.logits, c)
        relevances: list[Tensor] = []
        for block, ct in zip(reversed(model.blocks), reversed(trace.blocks), strict=True):
            r, r_attn = _class_relprop(block, ct, r)
            relevances.insert(0, cls_row_layout(r_attn))
    result = AttributionResult(
        logits=trace.logits.detach(),
        target=c,
        relevances=relevances,
        gradients=[cls_row_layout(g.detach()) for g in grads],
        grid=trace.grid,
        num_prefix_tokens=1,
    )
    return result, r


def xcit_attention_relevance(
    model: nn.Module, x: Tensor, target: int | Tensor | None = None
) -> AttributionResult:
    """R_A^l and G_l of every class-attention layer (``xcit_relevance``'s first part)."""
    return xcit_relevance(model, x, target)[0]


def xcit_transformer_attribution(
    model: nn.Module,
    x: Tensor,
    target: int | Tensor | None = None,
    start_layer: int = 0,
) -> Tensor:
    """The XCiT's Transformer Attribution map, min-max scaled: (B, C, H, W) -> (B, gh, gw):
    the CLS's row of R = (I + Ā_L) ⋯ (I + Ā_s) over the patches (the class-attention layers)."""
    return attribution_map(xcit_attention_relevance(model, x, target), None, start_layer)
