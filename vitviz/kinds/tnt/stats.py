"""Head statistics of a TNT per block and outer head, from A_b (heads, 1 + N, 1 + N).

Mean attention distance: Σ_j A[q, j]·‖pos_q − pos_j‖ over the patch keys j in input pixels,
averaged over the patch queries q, pos the centre of a patch. Entropy: of each patch query's
row over every key (the CLS included), in nats, averaged over the patch queries. Prefix share:
the share of a patch query's attention on the CLS key, averaged (DESIGN §5), as a ViT's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from vitviz.kinds.staged_head_stats import cell_centres, layer_statistics, statistics_table

if TYPE_CHECKING:
    from vitviz.kinds.tnt.analysis import TNTAnalysis


def head_statistics(analysis: TNTAnalysis) -> dict[str, np.ndarray]:
    """``ModelKind.head_statistics``: distance, entropy and prefix share (L, heads)."""
    a = analysis
    centres = cell_centres(a.stage_grids[0], a.patch_size)
    stats = [layer_statistics(attn, 1, centres, centres) for attn in a.attentions]
    return statistics_table(a.attentions, *zip(*stats, strict=True))
