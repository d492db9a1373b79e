"""Grad-SAM (Barkan et al., CIKM 2021): mean over layers and heads of ReLU(∇A) ⊙ A."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from vitviz.explain.maps import attention_maps
from vitviz.explain.tokens import min_max_scale


def grad_sam(
    attentions: Sequence[Tensor],
    gradients: Sequence[Tensor],
    grid: tuple[int, int],
    num_prefix: int,
    query: int | None = 0,
) -> Tensor:
    """mean_{l,h} (G_l⁺ ⊙ A_l)[q, patches], min-max scaled: L × (B, H, N, N) -> (B, gh, gw).

    ``query`` is a token index (0 = CLS); None averages the rows of all patch queries.
    """
    if not attentions:
        raise ValueError("no attention layers were given")
    if len(attentions) != len(gradients):
        raise ValueError(f"{len(attentions)} attention layers but {len(gradients)} gradients")
    total: Tensor | None = None
    for a, g in zip(attentions, gradients, strict=True):
        if a.shape != g.shape:
            raise ValueError(f"attention {tuple(a.shape)} vs gradient {tuple(g.shape)}")
        rows = attention_maps(g.clamp_min(0) * a, grid, num_prefix, query)  # (B, H, gh, gw)
        total = rows.sum(dim=1) if total is None else total + rows.sum(dim=1)
    assert total is not None
    mean = total / (len(attentions) * attentions[0].shape[1])
    return min_max_scale(mean)


def stack_layers(attention: Tensor) -> list[Tensor]:
    """(L, H, N, N) of one image -> L × (1, H, N, N) float32."""
    return [a.to(torch.float32)[None] for a in attention]
