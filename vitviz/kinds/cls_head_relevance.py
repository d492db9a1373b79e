"""What the Transformer Attribution of the kinds whose head reads a CLS made by class-attention
layers (CaiT, XCiT; DESIGN §5) shares: the class logit's relevance taken down through the head
to the final tokens (``head_relevance``), and a class-attention layer's CLS row laid out as the
captured (B, H, N, N) matrix (``cls_row_layout``)."""

from __future__ import annotations

import torch
from torch import Tensor

from vitviz.explain.attribution import linear_rule, one_hot_relevance, safe_divide


def head_relevance(tokens: Tensor, head_weight: Tensor, logits: Tensor, c: Tensor) -> Tensor:
    """(B, N, D) relevance at the final norm's tokens ``tokens`` (B, N, D) of logit c (B,) of
    ``logits`` (B, C): the head (weight (C, D)) by the z⁺ rule at the CLS's token, the final
    norm unchanged, the CLS's pick by the z rule; 0 on the patches."""
    r_head = linear_rule(tokens[:, 0], head_weight, one_hot_relevance(logits, c))
    r = torch.zeros_like(tokens)
    r[:, 0] = tokens[:, 0] * safe_divide(r_head, tokens[:, 0])
    return r


def cls_row_layout(t: Tensor) -> Tensor:
    """(B, H, 1, N) -> (B, H, N, N), the CLS's row, 0 elsewhere."""
    B, H, _, N = t.shape
    out = t.new_zeros(B, H, N, N)
    out[:, :, :1] = t
    return out
