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

from vitviz.kinds.staged_head_stats import (
    cell_centres,
    layer_statistics,
    nan_heads,
    statistics_table,
)

if TYPE_CHECKING:
    from vitviz.kinds.volo.analysis import VOLOAnalysis


def head_statistics(analysis: VOLOAnalysis) -> dict[str, np.ndarray]:
    """``ModelKind.head_statistics``: distance, entropy and prefix share (L, most heads), NaN
    beyond a layer's heads, in the outlookers and in the class blocks."""
    a = analysis
    stats = []
    for attn, s, how in zip(a.attentions, a.block_stages, a.layer_kinds, strict=True):
        if how != "self":
            stats.append((nan_heads(attn),) * 3)
            continue
        pos = cell_centres(a.stage_grids[s], a.stage_pixels[s])
        stats.append(layer_statistics(attn, 0, pos, pos))  # no prefix: share 0
    return statistics_table(a.attentions, *zip(*stats, strict=True))
