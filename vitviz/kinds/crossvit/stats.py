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

from vitviz.kinds.staged_head_stats import (
    cell_centres,
    layer_statistics,
    nan_heads,
    statistics_table,
)

if TYPE_CHECKING:
    from vitviz.kinds.crossvit.analysis import CrossViTAnalysis


def head_statistics(analysis: CrossViTAnalysis) -> dict[str, np.ndarray]:
    """``ModelKind.head_statistics``: distance, entropy and CLS share (L, most heads), NaN
    beyond a layer's heads and in the cross-attention layers."""
    a = analysis
    stats = []
    for attn, b, how in zip(a.attentions, a.block_stages, a.layer_kinds, strict=True):
        if how == "cross":
            stats.append((nan_heads(attn),) * 3)
            continue
        pos = cell_centres(a.stage_grids[b], a.stage_pixels[b])
        stats.append(layer_statistics(attn, 1, pos, pos))
    return statistics_table(a.attentions, *zip(*stats, strict=True))
