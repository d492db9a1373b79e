"""What the engine asks of a VOLO, as plain numpy for the window (no Qt, no workers).

A query is a cell of stage 0's grid (row, col). Each layer's row (``methods.layer_rows``: an
outlooker's folded row on stage 0's grid, a transformer block's on the half grid, a class
block's CLS row) is drawn at its grid in the big map and, resampled nearest to the thumbnail
grid, in the head grid; a class block's share on the CLS key is ``prefix_attention`` (NaN for
the other layers: they have no prefix key).
"""

from __future__ import annotations

from typing import Any

from vitviz.kindapi.protocol import ModelKind, ModelShape, QueryMaps, Session
from vitviz.kinds.staged_engine import (
    LayerRows,
    finest_thumbnail,
    prepared_words,
    staged_model_shape,
    staged_query_maps,
)


def model_shape(loaded: Any, kind: ModelKind) -> ModelShape:
    cfg = loaded.model.config
    (h0, w0), (h1, w1) = cfg.stage_grids()
    lines = [
        f"input {cfg.image_size[0]}×{cfg.image_size[1]}; {prepared_words(loaded)}",
        f"stage 0: {cfg.depths[0]} outlookers on {h0}×{w0}, width {cfg.dims[0]}, "
        f"{cfg.heads[0]} heads",
        f"stages 1–{cfg.num_stages - 1}: {sum(cfg.depths[1:])} transformer blocks on {h1}×{w1}, "
        f"width {cfg.dims[1]}, heads {'-'.join(map(str, cfg.heads[1:]))}",
        f"{cfg.class_blocks} class blocks; classes: {cfg.num_classes}",
    ]
    return staged_model_shape(
        loaded,
        kind,
        lines,
        heads=max(cfg.heads),
        num_prefix_tokens=0,
        headline=f"{cfg.depth} attention layers (outlook, self, class), {max(cfg.heads)} heads",
    )


# stage 0's grid when it is at most THUMB_MAX_CELLS a side, else the half grid
thumbnail_grid = finest_thumbnail


def query_maps(session: Session, query: tuple[int, int] | None) -> QueryMaps:
    """Every layer's and head's row of the query at the thumbnail grid, their mean, every
    layer's rows at its grid and a class block's share on the CLS key."""
    from vitviz.kinds.kind_methods import token_under
    from vitviz.kinds.volo.methods import layer_rows

    a = session.analysis

    def rows_of(i: int) -> LayerRows:
        s = a.block_stages[i]
        cls = a.layer_kinds[i] == "class"
        token = -1 if query is None or cls else token_under(a, s, query)
        rows = layer_rows(a, i, query).float().cpu().numpy()  # (heads, H, W)
        prefix = a.attentions[i][:, 0, :1].float().cpu().numpy() if cls else None
        return LayerRows(rows, a.stage_pixels[s], token, prefix)

    return staged_query_maps(a, query, thumbnail_grid(a), 1, rows_of)
