"""Token layout helpers: queries, and the patch part of a token row as a grid."""

from __future__ import annotations

import torch
from torch import Tensor


def query_token(
    patch: tuple[int, int] | None, grid: tuple[int, int], num_prefix: int
) -> int | None:
    """Token index of the query: CLS (0) for ``None`` when there is a prefix, else a patch.

    Returns ``None`` for ``patch=None`` on a model without prefix tokens: the callers then use
    the mean over all patch queries.
    """
    if patch is None:
        return 0 if num_prefix > 0 else None
    row, col = patch
    gh, gw = grid
    if not (0 <= row < gh and 0 <= col < gw):
        raise ValueError(f"patch ({row}, {col}) is outside the {gh}×{gw} grid")
    return num_prefix + row * gw + col


def start_vector(
    query: int | None, num_tokens: int, num_prefix: int, batch: int, like: Tensor
) -> Tensor:
    """(B, N) one-hot row e_q, or the mean over patch queries when ``query`` is None."""
    r = torch.zeros(batch, num_tokens, dtype=like.dtype, device=like.device)
    if query is None:
        r[:, num_prefix:] = 1.0 / (num_tokens - num_prefix)
    else:
        if not 0 <= query < num_tokens:
            raise ValueError(f"query token {query} out of range for {num_tokens} tokens")
        r[:, query] = 1.0
    return r


def patch_part(rows: Tensor, grid: tuple[int, int], num_prefix: int) -> Tensor:
    """(..., N) token values -> (..., gh, gw) values of the patch tokens."""
    gh, gw = grid
    patches = rows[..., num_prefix:]
    if patches.shape[-1] != gh * gw:
        raise ValueError(f"{patches.shape[-1]} patch tokens do not fill a {gh}×{gw} grid")
    return patches.reshape(*rows.shape[:-1], gh, gw)


def scale_to_max(maps: Tensor) -> Tensor:
    """(B, gh, gw) divided by each map's maximum (all-zero maps stay zero)."""
    peak = maps.flatten(1).amax(dim=1).clamp_min(torch.finfo(maps.dtype).tiny)
    return maps / peak[:, None, None]


def min_max_scale(maps: Tensor) -> Tensor:
    """(B, gh, gw) scaled to [0, 1] per map (constant maps become zero)."""
    flat = maps.flatten(1)
    lo = flat.amin(dim=1)[:, None, None]
    span = (flat.amax(dim=1)[:, None, None] - lo).clamp_min(torch.finfo(maps.dtype).tiny)
    return (maps - lo) / span
