"""Head statistics of a VOLO per attention layer and head (DESIGN §5), from a transformer
block's A (heads, N, N) on the half grid: mean attention distance over the keys in input
pixels (a token is ``stage_pixels[1]`` wide, its position its cell's centre) and the entropy of
a query's row, each averaged over the queries; the share on prefix keys is 0 (it has none). An
outlooker's rows are no distribution (a cell's row sums to the windows covering it) and a class
block has no patch query: NaN there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from vitviz.kinds.staged_analysis import padded

if TYPE_CHECKING:
    from vitviz.kinds.volo.analysis import VOLOAnalysis


def _centres(grid: tuple[int, int], pixels: float) -> torch.Tensor:
    """(h·w, 2) centre (y, x) of each cell in input pixels."""
    ys = (torch.arange(grid[0], dtype=torch.float64) + 0.5) * pixels
    xs = (torch.arange(grid[1], dtype=torch.float64) + 0.5) * pixels
    return torch.stack(torch.meshgrid(ys, xs, indexing="ij"), dim=-1).reshape(-1, 2)


def head_statistics(analysis: VOLOAnalysis) -> dict[str, np.ndarray]:
    """``ModelKind.head_statistics``: distance, entropy and prefix share (L, most heads), NaN
    beyond a layer's heads, in the outlookers and in the class blocks."""
    a = analysis
    dist, ent, share = [], [], []
    for attn, s, how in zip(a.attentions, a.block_stages, a.layer_kinds, strict=True):
        if how != "self":
            nan = np.full(int(attn.shape[0]), np.nan, dtype=np.float32)
            dist.append(nan), ent.append(nan), share.append(nan)
            continue
        rows = attn.double()  # (heads, N, N)
        pos = _centres(a.stage_grids[s], a.stage_pixels[s]).to(rows.device)
        d = torch.cdist(pos, pos)
        dist.append((rows * d).sum(dim=-1).mean(dim=-1).float().cpu().numpy())
        e = -(rows * (rows + torch.finfo(rows.dtype).tiny).log()).sum(dim=-1).mean(dim=-1)
        ent.append(e.float().cpu().numpy())
        share.append(np.zeros(int(attn.shape[0]), dtype=np.float32))
    most = max(int(t.shape[0]) for t in a.attentions)
    return {
        "distance": padded(dist, most),
        "entropy": padded(ent, most),
        "prefix_share": padded(share, most),
    }
