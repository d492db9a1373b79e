"""Transformer Attribution (Chefer, Gur & Wolf, CVPR 2021) on vitviz's CaiT, by the ViT's rules.

The CaiT's forward pass (``vitviz.kinds.cait.network``) is written out here with the inputs of
every rule, and the class logit's relevance is propagated down through the head, the final norm,
the class-attention blocks and the talking-heads self-attention blocks with the rule functions
of ``vitviz.explain.attribution`` (the same vocabulary as the ViT's, nothing new):

- Linear (qkv, q, k, v, proj, fc1, fc2, the head): z⁺ rule (α = 1, β = 0), bias ignored;
- LayerNorm, GELU, softmax, dropout, LayerScale: relevance passes unchanged;
- A·V and Q·Kᵀ (q·Kᵀ of the CLS in class attention): z rule to both operands, each halved;
- residual add: ``add_rule`` (z rule, each part rescaled to its |share| of ΣR); a tensor read
  twice or more (the residual and the branch; a class-attention block's normed tokens read by
  q, k and v): ``fork_rule``, the relevances added; tokens picked from a tensor (the CLS for the
  head and for q, the CLS and the patches carried past a class-attention block): the z rule
  through the selection, x ⊙ R/x;
- talking heads: the pre-softmax mix ``proj_l`` and the post-softmax mix ``proj_w`` are Linears
  over the head axis (H -> H at each (query, key)): z⁺ rule over the heads, bias ignored;
- R_A^l, "the attention's relevance", is taken where the matrix multiplies V: a self-attention
  layer's post-``proj_w`` matrix (the captured one), a class-attention layer's CLS row;
- class attention: only the CLS queries; the patches' residual stream passes a class-attention
  block unchanged (its relevance at the block's output is carried to its input, plus what k and
  v hand back); the CLS token enters at the class-attention stage, so its relevance below the
  first class-attention block is the learnt token's and is not passed on (the self-attention
  blocks see the patches only).

R_A^l and G_l = ∂y_c/∂A_l are handed over in the captured layout (B, H, 1 + P, 1 + P) over
[CLS, patches]: a self-attention layer's (P, P) at [1:, 1:], a class-attention layer's CLS row
at [0], zero elsewhere (where the captured matrix is the identity its gradient is 0, and so is
R_A here). The map is then the ViT's: Ā_l = mean_h((G_l ⊙ R_A^l)⁺), R = I, R ← R + Ā_l·R for
l = s..L, the query's row over the patches (the CLS's, or a patch's: a patch has rows in the
self-attention layers only), min-max scaled: the CaiT's relevance chain with R_A in place of A.
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
class _MlpTrace:
    res: Tensor  # (B, T, D) residual input of the MLP add; also the fork's input
    branch: Tensor  # (B, T, D) MLP branch output (after LayerScale)
    mlp_in: Tensor  # (B, T, D) input of fc1 (after norm2)
    hidden: Tensor  # (B, T, hidden) input of fc2


@dataclass
class _SelfTrace:
    """A talking-heads self-attention block over the patches (P of them)."""

    res: Tensor  # (B, P, D) the patches at the block's input: residual and the branch's fork
    branch: Tensor  # (B, P, D) attention branch output (after LayerScale)
    attn_in: Tensor  # (B, P, D) norm1 output, input of qkv
    q: Tensor  # (B, H, P, hd) unscaled
    k: Tensor
    v: Tensor
    scores: Tensor  # (B, H, P, P) (q·scale)·kᵀ, input of proj_l
    probs: Tensor  # (B, H, P, P) softmax output, input of proj_w
    attn: Tensor  # (B, H, P, P) proj_w output: the matrix that multiplies V (autograd graph)
    ctx: Tensor  # (B, P, D) input of proj
    mlp: _MlpTrace


@dataclass
class _ClassTrace:
    """A class-attention block: the CLS queries [CLS, patches] (N = 1 + P tokens)."""

    tokens: Tensor  # (B, N, D) the block's input
    branch: Tensor  # (B, 1, D) attention branch output (after LayerScale)
    u: Tensor  # (B, N, D) norm1 output, read by q (CLS only), k and v
    q: Tensor  # (B, H, 1, hd) unscaled
    k: Tensor  # (B, H, N, hd)
    v: Tensor
    attn: Tensor  # (B, H, 1, N) the CLS's attention (autograd graph)
    ctx: Tensor  # (B, 1, D) input of proj
    mlp: _MlpTrace


@dataclass
class _Trace:
    logits: Tensor  # (B, C)
    self_blocks: list[_SelfTrace]
    class_blocks: list[_ClassTrace]
    tokens: Tensor  # (B, N, D) after the final norm
    grid: tuple[int, int]


# -- forward pass with the intermediates ----------------------------------------------------------


def _heads_last(a: Tensor) -> Tensor:
    """(B, H, Q, K) -> (B, Q, K, H): the layout in which a head-mixing Linear acts."""
    return a.permute(0, 2, 3, 1)


def _heads_first(a: Tensor) -> Tensor:
    """(B, Q, K, H) -> (B, H, Q, K)."""
    return a.permute(0, 3, 1, 2)


def _mlp(block: nn.Module, res: Tensor) -> tuple[Tensor, _MlpTrace]:
    """res + LayerScale(mlp(norm2(res))), eval mode: (B, T, D) -> (B, T, D), with its trace."""
    mlp = block.mlp
    mlp_in = block.norm2(res)
    hidden = mlp.norm(mlp.act(mlp.fc1(mlp_in)))
    branch = block.ls2(mlp.fc2(hidden))
    return res + branch, _MlpTrace(res, branch, mlp_in, hidden)


def _self_block(block: nn.Module, p: Tensor) -> tuple[Tensor, _SelfTrace]:
    """A talking-heads self-attention block on the patches (B, P, D), eval mode."""
    att = block.attn
    B, P, D = p.shape
    H, hd = att.heads, att.head_dim
    attn_in = block.norm1(p)
    q, k, v = att.qkv(attn_in).reshape(B, P, 3, H, hd).permute(2, 0, 3, 1, 4).unbind(0)
    scores = (q * att.scale) @ k.transpose(-2, -1)  # (B, H, P, P)
    probs = _heads_first(att.proj_l(_heads_last(scores))).softmax(dim=-1)
    attn = _heads_first(att.proj_w(_heads_last(probs)))
    ctx = (attn @ v).transpose(1, 2).reshape(B, P, D)
    branch = block.ls1(att.proj(ctx))
    out, mlp = _mlp(block, p + branch)
    return out, _SelfTrace(p, branch, attn_in, q, k, v, scores, probs, attn, ctx, mlp)


def _class_block(block: nn.Module, x: Tensor) -> tuple[Tensor, _ClassTrace]:
    """A class-attention block on [CLS, patches] (B, N, D) -> the CLS's new token (B, 1, D)."""
    att = block.attn
    B, N, D = x.shape
    H, hd = att.heads, att.head_dim
    u = block.norm1(x)
    q = att.q(u[:, :1]).reshape(B, 1, H, hd).transpose(1, 2)  # (B, H, 1, hd)
    k = att.k(u).reshape(B, N, H, hd).transpose(1, 2)
    v = att.v(u).reshape(B, N, H, hd).transpose(1, 2)
    attn = ((q * att.scale) @ k.transpose(-2, -1)).softmax(dim=-1)  # (B, H, 1, N)
    ctx = (attn @ v).transpose(1, 2).reshape(B, 1, D)
    branch = block.ls1(att.proj(ctx))
    c, mlp = _mlp(block, x[:, :1] + branch)
    return c, _ClassTrace(x, branch, u, q, k, v, attn, ctx, mlp)


def _forward(model: nn.Module, x: Tensor) -> _Trace:
    """The CaiT's forward pass (eval mode), written out so every rule sees its inputs."""
    tokens, grid = model.embed(x)  # (B, N, D) [CLS, patches]; the CLS waits for the CA blocks
    S = model.config.self_depth
    self_blocks: list[_SelfTrace] = []
    class_blocks: list[_ClassTrace] = []
    for block in model.blocks[:S]:
        p, st = _self_block(block, tokens[:, 1:])
        tokens = torch.cat([tokens[:, :1], p], dim=1)
        self_blocks.append(st)
    for block in model.blocks[S:]:
        c, ct = _class_block(block, tokens)
        tokens = torch.cat([c, tokens[:, 1:]], dim=1)
        class_blocks.append(ct)
    tokens = model.norm(tokens)
    logits = model.head(tokens[:, 0])
    return _Trace(logits, self_blocks, class_blocks, tokens, grid)


# -- relevance propagation ------------------------------------------------------------------------


def _mlp_relprop(block: nn.Module, mt: _MlpTrace, r: Tensor) -> Tensor:
    """Relevance at res + branch (B, T, D) -> at res: the add, fc2, fc1 (GELU, norm2 and
    LayerScale unchanged) and the fork at res."""
    r_res, r_branch = add_rule(mt.res, mt.branch, r)
    r_hidden = linear_rule(mt.hidden, block.mlp.fc2.weight, r_branch)
    return fork_rule(mt.res, r_res, linear_rule(mt.mlp_in, block.mlp.fc1.weight, r_hidden))


def _mix_relprop(linear: nn.Linear, x: Tensor, r: Tensor) -> Tensor:
    """z⁺ rule through a head-mixing Linear (bias ignored): x, r (B, H, Q, K) -> (B, H, Q, K)."""
    return _heads_first(linear_rule(_heads_last(x), linear.weight, _heads_last(r)))


def _self_relprop(block: nn.Module, st: _SelfTrace, r: Tensor) -> tuple[Tensor, Tensor]:
    """Relevance at the block's output patches (B, P, D) -> (at its input patches, R_A
    (B, H, P, P) at the post-``proj_w`` matrix)."""
    att = block.attn
    r = _mlp_relprop(block, st.mlp, r)
    r_res, r_branch = add_rule(st.res, st.branch, r)
    B, H, P, hd = st.v.shape
    r_ctx = linear_rule(st.ctx, att.proj.weight, r_branch)  # LayerScale: unchanged
    r_ctx = r_ctx.reshape(B, P, H, hd).transpose(1, 2)  # (B, H, P, hd)
    r_attn, r_v = matmul_rule(st.attn, st.v, r_ctx)
    r_probs = _mix_relprop(att.proj_w, st.probs, r_attn)
    r_scores = _mix_relprop(att.proj_l, st.scores, r_probs)  # the softmax: unchanged
    r_q, r_kt = matmul_rule(st.q, st.k.transpose(-2, -1), r_scores)
    r_qkv = torch.stack([r_q, r_kt.transpose(-2, -1), r_v]).permute(1, 3, 0, 2, 4)
    r_in = linear_rule(st.attn_in, att.qkv.weight, r_qkv.reshape(B, P, 3 * H * hd))
    return fork_rule(st.res, r_res, r_in), r_attn


def _class_relprop(block: nn.Module, ct: _ClassTrace, r: Tensor) -> tuple[Tensor, Tensor]:
    """Relevance at the block's output [CLS, patches] (B, N, D) -> (at its input, R_A
    (B, H, 1, N) of the CLS's row)."""
    att = block.attn
    r_c = _mlp_relprop(block, ct.mlp, r[:, :1])
    r_cls, r_branch = add_rule(ct.tokens[:, :1], ct.branch, r_c)
    B, H, _, hd = ct.v.shape
    r_ctx = linear_rule(ct.ctx, att.proj.weight, r_branch).reshape(B, 1, H, hd).transpose(1, 2)
    r_attn, r_v = matmul_rule(ct.attn, ct.v, r_ctx)
    r_q, r_kt = matmul_rule(ct.q, ct.k.transpose(-2, -1), r_attn)

    def heads_back(t: Tensor) -> Tensor:  # (B, H, T, hd) -> (B, T, D)
        return t.transpose(1, 2).reshape(B, t.shape[2], H * hd)

    cls = ct.u[:, :1]  # q reads the CLS's row of u: z rule through the selection
    r_u_q = torch.zeros_like(ct.u)
    r_u_q[:, :1] = cls * safe_divide(linear_rule(cls, att.q.weight, heads_back(r_q)), cls)
    r_u_k = linear_rule(ct.u, att.k.weight, heads_back(r_kt.transpose(-2, -1)))
    r_u_v = linear_rule(ct.u, att.v.weight, heads_back(r_v))
    r_u = fork_rule(ct.u, r_u_q + r_u_k, r_u_v)  # u read by q, k and v: the three added
    # the input's tokens: the CLS by its residual, the patches carried to the output (each
    # picked from the input: z rule through the selection), and both through norm1
    # (unchanged) to the branch
    x = ct.tokens
    r_carried = x * safe_divide(torch.cat([r_cls, r[:, 1:]], dim=1), x)
    return fork_rule(x, r_carried, r_u), r_attn


def _embed_self(t: Tensor) -> Tensor:
    """(B, H, P, P) -> (B, H, 1 + P, 1 + P), at the patches' rows and columns, 0 elsewhere."""
    B, H, P, _ = t.shape
    out = t.new_zeros(B, H, P + 1, P + 1)
    out[:, :, 1:, 1:] = t
    return out


def cait_attention_relevance(
    model: nn.Module, x: Tensor, target: int | Tensor | None = None
) -> AttributionResult:
    """R_A^l and G_l of every layer of vitviz's CaiT for class ``target`` (None: each image's
    top class), each L × (B, H, 1 + P, 1 + P) in the captured layout (see the module docstring).

    x: (B, C, H, W) on the model's device. One forward pass with autograd (for G_l), one
    backward pass for the gradients and one relevance pass.
    """
    if getattr(model, "model_kind", None) != "cait" or not hasattr(model, "embed"):
        raise ValueError("CaiT transformer attribution needs vitviz's own CaiT (its blocks)")
    require_classifier_in_eval(model)
    S = model.config.self_depth
    with torch.enable_grad():
        x = x.detach().requires_grad_(True)
        trace = _forward(model, x)
        c = target_classes(trace.logits, target)
        y = trace.logits.gather(1, c[:, None]).sum()
        mats = [t.attn for t in trace.self_blocks] + [t.attn for t in trace.class_blocks]
        grads = torch.autograd.grad(y, mats)
    with torch.no_grad():
        r = head_relevance(trace.tokens, model.head.weight, trace.logits, c)
        class_rel: list[Tensor] = []
        for block, ct in zip(reversed(model.blocks[S:]), reversed(trace.class_blocks), strict=True):
            r, r_attn = _class_relprop(block, ct, r)
            class_rel.insert(0, cls_row_layout(r_attn))
        r = r[:, 1:]  # the CLS's relevance here is the learnt token's: not passed on
        self_rel: list[Tensor] = []
        for block, st in zip(reversed(model.blocks[:S]), reversed(trace.self_blocks), strict=True):
            r, r_attn = _self_relprop(block, st, r)
            self_rel.insert(0, _embed_self(r_attn))
    gradients = [_embed_self(g.detach()) for g in grads[:S]]
    gradients += [cls_row_layout(g.detach()) for g in grads[S:]]
    return AttributionResult(
        logits=trace.logits.detach(),
        target=c,
        relevances=self_rel + class_rel,
        gradients=gradients,
        grid=trace.grid,
        num_prefix_tokens=1,
    )


def cait_transformer_attribution(
    model: nn.Module,
    x: Tensor,
    target: int | Tensor | None = None,
    start_layer: int = 0,
    patch: tuple[int, int] | None = None,
) -> Tensor:
    """The CaiT's Transformer Attribution map, min-max scaled: (B, C, H, W) -> (B, gh, gw):
    row q of R = (I + Ā_L) ⋯ (I + Ā_s) over the patches, q the CLS or the token of ``patch``."""
    return attribution_map(cait_attention_relevance(model, x, target), patch, start_layer)
