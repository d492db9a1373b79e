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

from vitviz.kinds.staged_head_stats import cell_centres, layer_statistics, statistics_table

if TYPE_CHECKING:
    from vitviz.kinds.pit.analysis import PiTAnalysis


def head_statistics(analysis: PiTAnalysis) -> dict[str, np.ndarray]:
    """``ModelKind.head_statistics``: distance, entropy and prefix share (L, most heads), NaN
    beyond a block's heads."""
    a = analysis
    stats = []
    for attn, s in zip(a.attentions, a.block_stages, strict=True):
        pos = cell_centres(a.stage_grids[s], a.stage_pixels[s])
        stats.append(layer_statistics(attn, a.num_prefix_tokens, pos, pos))
    return statistics_table(a.attentions, *zip(*stats, strict=True))
