"""Head statistics of a LeViT per attention layer and head, from A_b (heads, N_q, N_k).

Mean attention distance: Σ_k A[q, k]·‖pos_q − pos_k‖ in input pixels, averaged over the
queries; pos_k the centre of key k's cell on the keys' grid, pos_q the centre of the cell the
query is read from (a block's own; a subsample's query (i, j) is the previous grid's token
(2i, 2j), where its attention bias has offset 0). Entropy: of each row in nats, averaged over
the queries. No prefix tokens: the prefix share is NaN.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from vitviz.kinds.staged_analysis import padded

if TYPE_CHECKING:
    from vitviz.kinds.levit.analysis import LeViTAnalysis


def centres(grid: tuple[int, int], pixels: float, step: int = 1) -> torch.Tensor:
    """(h·w, 2) centre (y, x) in input pixels of cell (i·step, j·step) of a grid of cells
    ``pixels`` wide, for each (i, j) of ``grid``."""
    ys = (torch.arange(grid[0], dtype=torch.float64) * step + 0.5) * pixels
    xs = (torch.arange(grid[1], dtype=torch.float64) * step + 0.5) * pixels
    return torch.stack(torch.meshgrid(ys, xs, indexing="ij"), dim=-1).reshape(-1, 2)


def head_statistics(analysis: LeViTAnalysis) -> dict[str, np.ndarray]:
    """``ModelKind.head_statistics``: distance and entropy (L, most heads), NaN beyond a
    layer's heads; prefix share all NaN."""
    a = analysis
    dist, ent = [], []
    for attn, s, k in zip(a.attentions, a.block_stages, a.key_stages, strict=True):
        rows = attn.double()
        key_px = a.stage_pixels[k]
        q_pos = centres(a.stage_grids[s], key_px, 2 if s != k else 1).to(rows.device)
        k_pos = centres(a.stage_grids[k], key_px).to(rows.device)
        d = torch.cdist(q_pos, k_pos)
        dist.append((rows * d).sum(dim=-1).mean(dim=-1).float().cpu().numpy())
        e = -(rows * (rows + torch.finfo(rows.dtype).tiny).log()).sum(dim=-1).mean(dim=-1)
        ent.append(e.float().cpu().numpy())
    most = max(int(t.shape[0]) for t in a.attentions)
    return {
        "distance": padded(dist, most),
        "entropy": padded(ent, most),
        "prefix_share": np.full((len(a.attentions), most), np.nan, dtype=np.float32),
    }
