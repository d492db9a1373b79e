"""The head statistics the staged kinds share (DESIGN §5): a grid's cell centres in input
pixels, a layer's mean attention distance, entropy and prefix share per head over its patch
queries, and the (layers, most heads) table ``ModelKind.head_statistics`` returns."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from vitviz.kinds.staged_analysis import padded


def cell_centres(grid: tuple[int, int], pixels: float, step: int = 1) -> Tensor:
    """(h·w, 2) float64 centre (y, x) in input pixels of cell (i·step, j·step) of a grid of
    cells ``pixels`` wide, for each (i, j) of ``grid`` (row-major)."""
    ys = (torch.arange(grid[0], dtype=torch.float64) * step + 0.5) * pixels
    xs = (torch.arange(grid[1], dtype=torch.float64) * step + 0.5) * pixels
    return torch.stack(torch.meshgrid(ys, xs, indexing="ij"), dim=-1).reshape(-1, 2)


def row_entropy(rows: Tensor, dims: int | tuple[int, ...] = -1) -> Tensor:
    """Entropy in nats of each attention row (heads, ..., N_k), averaged over ``dims``."""
    return -(rows * (rows + torch.finfo(rows.dtype).tiny).log()).sum(dim=-1).mean(dim=dims)


def layer_statistics(
    attn: Tensor, prefix: int, queries: Tensor, keys: Tensor
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(distance, entropy, prefix share) per head, each (heads,) float32, of one layer's
    attention (heads, P + N_q, P + N_k) (P = ``prefix`` tokens first), averaged over its patch
    queries: Σ_k A_qk·‖pos_q − pos_k‖ over the patch keys (``queries`` (N_q, 2), ``keys``
    (N_k, 2) their centres in input pixels), the row's entropy over every key, and the row's
    share on the prefix keys (0 without them)."""
    rows = attn.double()[:, prefix:]  # patch queries (heads, N_q, P + N_k)
    d = torch.cdist(queries.to(rows.device), keys.to(rows.device))  # (N_q, N_k)
    distance = (rows[..., prefix:] * d).sum(dim=-1).mean(dim=-1)
    share = rows[..., :prefix].sum(dim=-1).mean(dim=-1)
    return tuple(t.float().cpu().numpy() for t in (distance, row_entropy(rows), share))  # type: ignore[return-value]


def nan_heads(attn: Tensor) -> np.ndarray:
    """(heads,) float32 NaN: a layer the statistics say nothing of."""
    return np.full(int(attn.shape[0]), np.nan, dtype=np.float32)


def statistics_table(
    attentions: Sequence[Tensor],
    distance: Sequence[np.ndarray],
    entropy: Sequence[np.ndarray],
    prefix_share: Sequence[np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """``ModelKind.head_statistics``'s arrays (L, most heads) float32 from per-layer (heads,)
    values, NaN beyond a layer's heads; ``prefix_share`` None: all NaN (no prefix tokens)."""
    most = max(int(t.shape[0]) for t in attentions)
    if prefix_share is None:
        share = np.full((len(attentions), most), np.nan, dtype=np.float32)
    else:
        share = padded(prefix_share, most)
    return {
        "distance": padded(distance, most),
        "entropy": padded(entropy, most),
        "prefix_share": share,
    }
