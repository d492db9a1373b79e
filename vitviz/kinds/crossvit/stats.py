"""Head statistics of a CrossViT per attention layer and head (DESIGN §5), from a ViT block's
A (heads, 1 + N, 1 + N) on its branch's grid: mean attention distance over the patch keys in
input pixels (a token of branch b is ``stage_pixels[b]`` wide, its position its cell's
centre), the entropy of a patch query's row over every key and its share on the CLS, each
averaged over the patch queries. A cross-attention layer has no patch query (its one query is
the CLS): NaN there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from vitviz.kinds.staged_analysis import padded

if TYPE_CHECKING:
    from vitviz.kinds.crossvit.analysis import CrossViTAnalysis


def _centres(grid: tuple[int, int], pixels: float) -> torch.Tensor:
    """(h·w, 2) centre (y, x) of each cell in input pixels."""
    ys = (torch.arange(grid[0], dtype=torch.float64) + 0.5) * pixels
    xs = (torch.arange(grid[1], dtype=torch.float64) + 0.5) * pixels
    return torch.stack(torch.meshgrid(ys, xs, indexing="ij"), dim=-1).reshape(-1, 2)


def head_statistics(analysis: CrossViTAnalysis) -> dict[str, np.ndarray]:
    """``ModelKind.head_statistics``: distance, entropy and CLS share (L, most heads), NaN
    beyond a layer's heads and in the cross-attention layers."""
    a = analysis
    dist, ent, share = [], [], []
    for attn, b, how in zip(a.attentions, a.block_stages, a.layer_kinds, strict=True):
        if how == "cross":
            nan = np.full(int(attn.shape[0]), np.nan, dtype=np.float32)
            dist.append(nan), ent.append(nan), share.append(nan)
            continue
        rows = attn.double()[:, 1:]  # patch queries (heads, N, 1 + N)
        pos = _centres(a.stage_grids[b], a.stage_pixels[b]).to(rows.device)
        d = torch.cdist(pos, pos)
        dist.append((rows[..., 1:] * d).sum(dim=-1).mean(dim=-1).float().cpu().numpy())
        e = -(rows * (rows + torch.finfo(rows.dtype).tiny).log()).sum(dim=-1).mean(dim=-1)
        ent.append(e.float().cpu().numpy())
        share.append(rows[..., :1].sum(dim=-1).mean(dim=-1).float().cpu().numpy())
    most = max(int(t.shape[0]) for t in a.attentions)
    return {
        "distance": padded(dist, most),
        "entropy": padded(ent, most),
        "prefix_share": padded(share, most),
    }
