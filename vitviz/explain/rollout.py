"""Attention rollout, gradient rollout and relevance (DESIGN §5), by propagating one row.

Each method multiplies per-layer N × N matrices M_l; only the query's row of the product is
needed, so r ← e_q, then r ← r·M_l for l = L down to s: O(L·N²) instead of O(L·N³).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from vitviz.explain.fusion import fuse_heads
from vitviz.explain.tokens import min_max_scale, patch_part, scale_to_max, start_vector


def _check_layers(attentions: Sequence[Tensor], start_layer: int) -> None:
    if not attentions:
        raise ValueError("no attention layers were given")
    L = len(attentions)
    if not 0 <= start_layer < L:
        raise ValueError(f"start layer {start_layer} out of range for {L} layers")


def discard_smallest(fused: Tensor, ratio: float, protected: Tensor) -> Tensor:
    """Zero the ⌊ratio·N²⌋ smallest entries of each (N, N) matrix, keeping protected ones.

    fused: (B, N, N); protected: (B, N) bool, queries q whose q→q entry is never zeroed.
    """
    if not 0.0 <= ratio < 1.0:
        raise ValueError(f"discard ratio must be in [0, 1) (got {ratio})")
    B, N, _ = fused.shape
    k = math.floor(ratio * N * N)
    if k == 0:
        return fused
    flat = fused.reshape(B, N * N).clone()
    idx = flat.topk(k, dim=1, largest=False).indices  # (B, k)
    keep = torch.zeros_like(flat, dtype=torch.bool)
    keep.scatter_(1, idx, True)
    diag = torch.arange(N, device=fused.device) * (N + 1)  # flat index of q→q
    keep[:, diag] &= ~protected  # protected diagonal entries are not zeroed
    flat[keep] = 0
    return flat.reshape(B, N, N)


def add_identity_rownorm(m: Tensor) -> Tensor:
    """rownorm(M + I): (B, N, N), each row sums to 1."""
    eye = torch.eye(m.shape[-1], dtype=m.dtype, device=m.device)
    m = m + eye
    return m / m.sum(dim=-1, keepdim=True)


def _rollout_row(
    per_layer: Sequence[Tensor],
    query: int | None,
    num_prefix: int,
    discard_ratio: float,
    start_layer: int,
) -> Tensor:
    """Row q of Ã_L ⋯ Ã_s for fused layer matrices Â_l (B, N, N): (B, N)."""
    _check_layers(per_layer, start_layer)
    B, N, _ = per_layer[-1].shape
    r = start_vector(query, N, num_prefix, B, per_layer[-1])  # (B, N)
    protected = r > 0
    for fused in reversed(per_layer[start_layer:]):
        fused = discard_smallest(fused, discard_ratio, protected)
        r = (r.unsqueeze(1) @ add_identity_rownorm(fused)).squeeze(1)  # (B, N)
    return r


def rollout_row(
    attentions: Sequence[Tensor],
    query: int | None = 0,
    num_prefix: int = 1,
    fusion: str = "mean",
    heads: Sequence[int] | None = None,
    discard_ratio: float = 0.0,
    start_layer: int = 0,
) -> Tensor:
    """Attention rollout row R[q, :] over all tokens: L × (B, H, N, N) -> (B, N)."""
    fused = [fuse_heads(a, fusion, heads) for a in attentions]
    return _rollout_row(fused, query, num_prefix, discard_ratio, start_layer)


def rollout(
    attentions: Sequence[Tensor],
    grid: tuple[int, int],
    num_prefix: int,
    query: int | None = 0,
    fusion: str = "mean",
    heads: Sequence[int] | None = None,
    discard_ratio: float = 0.0,
    start_layer: int = 0,
) -> Tensor:
    """Attention rollout map R[q, patches], scaled to max 1: (B, gh, gw)."""
    row = rollout_row(attentions, query, num_prefix, fusion, heads, discard_ratio, start_layer)
    return scale_to_max(patch_part(row, grid, num_prefix))


def gradient_rollout(
    attentions: Sequence[Tensor],
    gradients: Sequence[Tensor],
    grid: tuple[int, int],
    num_prefix: int,
    query: int | None = 0,
    discard_ratio: float = 0.0,
    start_layer: int = 0,
) -> Tensor:
    """Rollout with Â_l = (mean_h(A_l ⊙ G_l))⁺, each layer with its own gradient: (B, gh, gw)."""
    _check_pairs(attentions, gradients)
    fused = [(a * g).mean(dim=1).clamp_min(0) for a, g in zip(attentions, gradients, strict=True)]
    row = _rollout_row(fused, query, num_prefix, discard_ratio, start_layer)
    return scale_to_max(patch_part(row, grid, num_prefix))


def relevance_row(
    attentions: Sequence[Tensor],
    gradients: Sequence[Tensor],
    query: int | None = 0,
    num_prefix: int = 1,
    start_layer: int = 0,
) -> Tensor:
    """Row q of R = (I + Ā_L) ⋯ (I + Ā_s), Ā_l = mean_h((G_l ⊙ A_l)⁺): (B, N)."""
    _check_pairs(attentions, gradients)
    _check_layers(attentions, start_layer)
    B, _, N, _ = attentions[-1].shape
    r = start_vector(query, N, num_prefix, B, attentions[-1])
    for a, g in zip(
        reversed(attentions[start_layer:]), reversed(gradients[start_layer:]), strict=True
    ):
        a_bar = (g * a).clamp_min(0).mean(dim=1)  # (B, N, N)
        r = r + (r.unsqueeze(1) @ a_bar).squeeze(1)
    return r


def relevance(
    attentions: Sequence[Tensor],
    gradients: Sequence[Tensor],
    grid: tuple[int, int],
    num_prefix: int,
    query: int | None = 0,
    start_layer: int = 0,
) -> Tensor:
    """Chefer et al. 2021 relevance map R[CLS, patches], min-max scaled: (B, gh, gw)."""
    row = relevance_row(attentions, gradients, query, num_prefix, start_layer)
    return min_max_scale(patch_part(row, grid, num_prefix))


def _check_pairs(attentions: Sequence[Tensor], gradients: Sequence[Tensor]) -> None:
    if len(attentions) != len(gradients):
        raise ValueError(f"{len(attentions)} attention layers but {len(gradients)} gradients")
    for i, (a, g) in enumerate(zip(attentions, gradients, strict=True)):
        if a.shape != g.shape:
            raise ValueError(f"layer {i}: attention {tuple(a.shape)} vs gradient {tuple(g.shape)}")
