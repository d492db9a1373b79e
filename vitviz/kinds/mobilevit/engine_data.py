"""What the engine asks of a MobileViT, as plain numpy for the window (no Qt, no workers).

A query is a cell of the first MobileViT block's feature grid (row, col); in every layer it is
the feature pixel of the layer's stage covering the cell's centre, and its row
(``methods.layer_rows``: its offset's sequence, its patch's row over every patch) is drawn on
the stage's patch grid in the big map and, resampled nearest to the thumbnail grid, in the
head grid. Without a query: the mean row over every offset and patch.
"""

from __future__ import annotations

from typing import Any

from vitviz.kindapi.protocol import ModelKind, ModelShape, QueryMaps, Session
from vitviz.kinds.mobilevit.analysis import MobileViTAnalysis
from vitviz.kinds.staged_engine import (
    LayerRows,
    prepared_words,
    staged_model_shape,
    staged_query_maps,
)


def model_shape(loaded: Any, kind: ModelKind) -> ModelShape:
    cfg = loaded.model.config
    size = "×".join(map(str, cfg.image_size))
    lines = [f"input {size}; {prepared_words(loaded)}"]
    for i, s in enumerate(cfg.attention_stages):
        h, w = cfg.feature_grid(s)
        p = cfg.patch_size
        lines.append(
            f"MobileViT block {i} (network stage {s}): {cfg.depths[s]} layers, width "
            f"{cfg.transformer_dims[s]}, {cfg.heads[s]} heads, {h}×{w} feature pixels in "
            f"{p}×{p} patches, MLP {cfg.mlp_dims[s]}"
        )
    lines.append(f"classes: {cfg.num_classes}; no prefix tokens (the head reads the average "
                 "pool of the final conv)")  # fmt: skip
    heads = cfg.layer_heads
    return staged_model_shape(
        loaded,
        kind,
        lines,
        heads=max(heads),
        num_prefix_tokens=0,
        headline=f"{cfg.depth} transformer layers, {max(heads)} heads",
    )


def thumbnail_grid(a: MobileViTAnalysis) -> tuple[tuple[int, int], int]:
    """The first block's patch grid (every layer's map is on a patch grid this or coarser)."""
    return tuple(a.patch_grids[0]), a.patch * a.stage_pixels[0]


def query_maps(session: Session, query: tuple[int, int] | None) -> QueryMaps:
    """Every layer's and head's row of the query at the thumbnail grid, their mean, and every
    layer's rows on its patch grid."""
    from vitviz.kinds.mobilevit.methods import layer_rows

    a = session.analysis

    def rows_of(b: int) -> LayerRows:
        token = -1 if query is None else a.offset_and_patch(b, query)[1]
        rows = layer_rows(a, b, query).float().cpu().numpy()  # (heads, nh, nw)
        return LayerRows(rows, a.patch * a.stage_pixels[a.block_stages[b]], token)

    return staged_query_maps(a, query, thumbnail_grid(a), 0, rows_of)
