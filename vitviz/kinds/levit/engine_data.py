"""What the engine asks of a LeViT, as plain numpy for the window (no Qt, no workers).

A query is a cell of the first stage's grid (row, col); in every layer it is the token of the
layer's queries' stage covering the cell's centre, and its row (``methods.block_rows``) is drawn
on the layer's keys' grid in the big map (a subsample's: the stage before's, finer) and,
resampled nearest to the thumbnail grid, in the head grid. Without a query: the mean row over
every query.
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
    size = "×".join(map(str, cfg.image_size))
    grids = cfg.stage_grids()
    lines = [f"stem stride {cfg.stem_stride}, trained at {size}; {prepared_words(loaded)}"]
    for s in range(cfg.num_stages):
        h, w = grids[s]
        down = f"subsample attention ({cfg.down_heads(s)} heads), " if s else ""
        lines.append(
            f"stage {s}: {down}{cfg.depths[s]} blocks, width {cfg.dims[s]}, {cfg.heads[s]} "
            f"heads, {h}×{w} tokens, MLP {cfg.mlp_hidden_dims[s]}"
        )
    lines.append(f"classes: {cfg.num_classes}; no prefix tokens (the head reads the mean of the "
                 "last stage's tokens)")  # fmt: skip
    heads = cfg.layer_heads
    return staged_model_shape(
        loaded,
        kind,
        lines,
        heads=max(heads),
        num_prefix_tokens=0,
        headline=f"{cfg.depth} attention layers, {min(heads)}–{max(heads)} heads",
    )


# the first stage's grid when it is at most THUMB_MAX_CELLS a side, else the finest that is
thumbnail_grid = finest_thumbnail


def query_maps(session: Session, query: tuple[int, int] | None) -> QueryMaps:
    """Every layer's and head's row of the query at the thumbnail grid, their mean, and every
    layer's rows on its keys' grid."""
    from vitviz.kinds.levit.methods import block_rows, token_of

    a = session.analysis

    def layer_rows(b: int) -> LayerRows:
        token = None if query is None else token_of(a, a.block_stages[b], query)
        rows = block_rows(a, b, token).float().cpu().numpy()  # (heads, h_k, w_k)
        return LayerRows(rows, a.stage_pixels[a.key_stages[b]], -1 if token is None else token)

    return staged_query_maps(a, query, thumbnail_grid(a), 0, layer_rows)
