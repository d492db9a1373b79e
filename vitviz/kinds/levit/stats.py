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

from vitviz.kinds.staged_head_stats import cell_centres, layer_statistics, statistics_table

if TYPE_CHECKING:
    from vitviz.kinds.levit.analysis import LeViTAnalysis


def head_statistics(analysis: LeViTAnalysis) -> dict[str, np.ndarray]:
    """``ModelKind.head_statistics``: distance and entropy (L, most heads), NaN beyond a
    layer's heads; prefix share all NaN."""
    a = analysis
    dist, ent = [], []
    for attn, s, k in zip(a.attentions, a.block_stages, a.key_stages, strict=True):
        key_px = a.stage_pixels[k]
        q_pos = cell_centres(a.stage_grids[s], key_px, 2 if s != k else 1)
        k_pos = cell_centres(a.stage_grids[k], key_px)
        d, e, _ = layer_statistics(attn, 0, q_pos, k_pos)
        dist.append(d), ent.append(e)
    return statistics_table(a.attentions, dist, ent)
