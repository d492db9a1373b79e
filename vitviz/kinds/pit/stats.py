"""Head statistics of a PiT per block and head, from A_b (heads, P + N_s, P + N_s).

Mean attention distance: Σ_j A[q, j]·‖pos_q − pos_j‖ over the patch keys j in input pixels,
averaged over the patch queries q, pos the centre of a token's cell of its stage's grid (a
token of stage s is ``stage_pixels[s]`` wide). Entropy: of each patch query's row over every
key (prefix tokens included), in nats, averaged over the patch queries. Prefix share: the
share of a patch query's attention that goes to the prefix tokens, averaged (DESIGN §5).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from vitviz.kinds.staged_analysis import padded

if TYPE_CHECKING:
    from vitviz.kinds.pit.analysis import PiTAnalysis


def _centres(grid: tuple[int, int], pixels: int) -> torch.Tensor:
    """(h·w, 2) centre (y, x) of each cell in input pixels."""
    ys = (torch.arange(grid[0], dtype=torch.float64) + 0.5) * pixels
    xs = (torch.arange(grid[1], dtype=torch.float64) + 0.5) * pixels
    return torch.stack(torch.meshgrid(ys, xs, indexing="ij"), dim=-1).reshape(-1, 2)


def head_statistics(analysis: PiTAnalysis) -> dict[str, np.ndarray]:
    """``ModelKind.head_statistics``: distance, entropy and prefix share (L, most heads), NaN
    beyond a block's heads."""
    a = analysis
    P = a.num_prefix_tokens
    dist, ent, share = [], [], []
    for attn, s in zip(a.attentions, a.block_stages, strict=True):
        rows = attn.double()[:, P:]  # patch queries (heads, N, P + N)
        pos = _centres(a.stage_grids[s], a.stage_pixels[s]).to(rows.device)
        d = torch.cdist(pos, pos)  # (N, N)
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
