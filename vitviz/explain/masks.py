"""DINO masks: per head, the smallest set of patches holding a share of the query's attention."""

from __future__ import annotations

import torch
from torch import Tensor

from vitviz.explain.maps import attention_maps


def dino_masks(
    attn: Tensor,
    grid: tuple[int, int],
    num_prefix: int,
    threshold: float = 0.6,
    query: int | None = 0,
) -> Tensor:
    """(B, H, N, N) one layer's attention -> (B, H, gh, gw) bool masks.

    The query's attention over the patches is normalised to sum 1 per head; the mask holds the
    largest patches until their cumulative share reaches ``threshold`` (the fewest that do).
    """
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"mask threshold must be in (0, 1] (got {threshold})")
    maps = attention_maps(attn, grid, num_prefix, query)  # (B, H, gh, gw)
    flat = maps.flatten(2)  # (B, H, P)
    share = flat / flat.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(flat.dtype).tiny)
    ordered, order = share.sort(dim=-1, descending=True)
    before = ordered.cumsum(dim=-1) - ordered  # mass of the larger patches before each one
    keep_sorted = before < threshold
    mask = torch.zeros_like(keep_sorted)
    mask.scatter_(-1, order, keep_sorted)
    return mask.reshape(maps.shape)
