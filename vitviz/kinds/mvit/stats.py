"""Head statistics of an MViTv2 per block and head, from A_b (heads, P + Nq, P + Nk).

Mean attention distance: Σ_j A[q, j]·‖pos_q − pos_j‖ over the patch keys j in input pixels,
averaged over the patch queries q, pos the centre of a query's cell of its stage's grid and of
a key's cell of the block's key grid (each cell over its stride's square from the top left).
Entropy: of each patch query's row over every key (the CLS included), in nats, averaged over the
patch queries. Prefix share: the share of a patch query's attention on the CLS key, averaged
(DESIGN §5).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from vitviz.kinds.staged_analysis import padded

if TYPE_CHECKING:
    from vitviz.kinds.mvit.analysis import MViTAnalysis


def _centres(grid: tuple[int, int], pixels: int) -> torch.Tensor:
    """(h·w, 2) centre (y, x) of each cell in input pixels."""
    ys = (torch.arange(grid[0], dtype=torch.float64) + 0.5) * pixels
    xs = (torch.arange(grid[1], dtype=torch.float64) + 0.5) * pixels
    return torch.stack(torch.meshgrid(ys, xs, indexing="ij"), dim=-1).reshape(-1, 2)


def head_statistics(analysis: MViTAnalysis) -> dict[str, np.ndarray]:
    """``ModelKind.head_statistics``: distance, entropy and prefix share (L, most heads), NaN
    beyond a block's heads."""
    a = analysis
    P = a.num_prefix_tokens
    dist, ent, share = [], [], []
    for b, (attn, s) in enumerate(zip(a.attentions, a.block_stages, strict=True)):
        rows = attn.double()[:, P:]  # patch queries (heads, Nq, P + Nk)
        queries = _centres(a.stage_grids[s], a.stage_pixels[s]).to(rows.device)
        keys = _centres(a.key_grids[b], a.key_pixels[b]).to(rows.device)
        d = torch.cdist(queries, keys)  # (Nq, Nk)
        dist.append((rows[..., P:] * d).sum(dim=-1).mean(dim=-1).float().cpu().numpy())
        e = -(rows * (rows + torch.finfo(rows.dtype).tiny).log()).sum(dim=-1).mean(dim=-1)
        ent.append(e.float().cpu().numpy())
        share.append(rows[..., :P].sum(dim=-1).mean(dim=-1).float().cpu().numpy())
    most = max(int(t.shape[0]) for t in a.attentions)
    return {
        "distance": padded(dist, most),
        "entropy": padded(ent, most),
        "prefix_share": padded(share, most),
    }
