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

from vitviz.kinds.staged_head_stats import cell_centres, layer_statistics, statistics_table

if TYPE_CHECKING:
    from vitviz.kinds.mvit.analysis import MViTAnalysis


def head_statistics(analysis: MViTAnalysis) -> dict[str, np.ndarray]:
    """``ModelKind.head_statistics``: distance, entropy and prefix share (L, most heads), NaN
    beyond a block's heads."""
    a = analysis
    stats = []
    for b, (attn, s) in enumerate(zip(a.attentions, a.block_stages, strict=True)):
        queries = cell_centres(a.stage_grids[s], a.stage_pixels[s])
        keys = cell_centres(a.key_grids[b], a.key_pixels[b])
        stats.append(layer_statistics(attn, a.num_prefix_tokens, queries, keys))
    return statistics_table(a.attentions, *zip(*stats, strict=True))
