"""Head statistics of a TNT per block and outer head, from A_b (heads, 1 + N, 1 + N).

Mean attention distance: Σ_j A[q, j]·‖pos_q − pos_j‖ over the patch keys j in input pixels,
averaged over the patch queries q, pos the centre of a patch. Entropy: of each patch query's
row over every key (the CLS included), in nats, averaged over the patch queries. Prefix share:
the share of a patch query's attention on the CLS key, averaged (DESIGN §5), as a ViT's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from vitviz.kinds.staged_analysis import padded

if TYPE_CHECKING:
    from vitviz.kinds.tnt.analysis import TNTAnalysis


def _centres(grid: tuple[int, int], pixels: int) -> torch.Tensor:
    """(h·w, 2) centre (y, x) of each cell in input pixels."""
    ys = (torch.arange(grid[0], dtype=torch.float64) + 0.5) * pixels
    xs = (torch.arange(grid[1], dtype=torch.float64) + 0.5) * pixels
    return torch.stack(torch.meshgrid(ys, xs, indexing="ij"), dim=-1).reshape(-1, 2)


def head_statistics(analysis: TNTAnalysis) -> dict[str, np.ndarray]:
    """``ModelKind.head_statistics``: distance, entropy and prefix share (L, heads)."""
    a = analysis
    centres = _centres(a.stage_grids[0], a.patch_size)
    dist, ent, share = [], [], []
    for attn in a.attentions:
        rows = attn.double()[:, 1:]  # patch queries (heads, N, 1 + N)
        d = torch.cdist(centres, centres).to(rows.device)  # (N, N)
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
