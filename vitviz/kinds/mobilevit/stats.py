"""Head statistics of a MobileViT per transformer layer and head, from A (heads, P, N, N).

Mean attention distance: Σ_m A[o, n, m]·‖pos_n − pos_m‖ in input pixels (the pixels at offset
o of patches n and m lie a whole number of patches apart: p · the stage's pixel size per
patch), averaged over every query (o, n). Entropy: of each row in nats, averaged over every
query. No prefix tokens: the prefix share is NaN.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from vitviz.kinds.staged_head_stats import cell_centres, row_entropy, statistics_table

if TYPE_CHECKING:
    from vitviz.kinds.mobilevit.analysis import MobileViTAnalysis


def head_statistics(analysis: MobileViTAnalysis) -> dict[str, np.ndarray]:
    """``ModelKind.head_statistics``: distance and entropy (L, most heads), NaN beyond a
    layer's heads; prefix share all NaN."""
    a = analysis
    dist, ent = [], []
    for attn, s in zip(a.attentions, a.block_stages, strict=True):
        rows = attn.double()  # (heads, P, N, N)
        pos = cell_centres(a.patch_grids[s], a.patch * a.stage_pixels[s]).to(rows.device)
        d = torch.cdist(pos, pos)  # (N, N)
        dist.append((rows * d).sum(dim=-1).mean(dim=(1, 2)).float().cpu().numpy())
        ent.append(row_entropy(rows, (1, 2)).float().cpu().numpy())
    return statistics_table(a.attentions, dist, ent)
