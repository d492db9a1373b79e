"""What the engine asks of a pyramid ViT, as plain numpy for the window (no Qt, no workers).

A query is a cell of the first stage's grid (row, col); in every block it is the token of the
block's stage covering the cell's centre, and its row (keys spread over the tokens they are made
of, ``methods.block_rows``) is drawn at the block's grid in the big map and, resampled nearest
to the thumbnail grid, in the head grid. Without a query: the mean row over every query.
"""

from __future__ import annotations

from typing import Any

from vitviz.kindapi.protocol import (
    ModelKind,
    ModelShape,
    QueryMaps,
    Session,
)
from vitviz.kinds.pyramid import hiera_words
from vitviz.kinds.pyramid.analysis import PyramidAnalysis
from vitviz.kinds.pyramid.hiera_config import HieraConfig
from vitviz.kinds.staged_engine import (
    THUMB_MAX_CELLS,
    LayerRows,
    prepared_words,
    staged_model_shape,
    staged_query_maps,
)


def model_shape(loaded: Any, kind: ModelKind) -> ModelShape:
    cfg = loaded.model.config
    size = "×".join(map(str, cfg.image_size))
    prepared = prepared_words(loaded)
    lines = []
    if isinstance(cfg, HieraConfig):
        lines += hiera_words.stage_lines(cfg)
        lines[0] += f"; {prepared}"
    else:
        lines.append(
            f"stem stride {cfg.patch_size} (kernel {cfg.stem_kernel}), trained at {size}; "
            + prepared
        )
        for s in range(cfg.num_stages):
            keys = "pooled to 7×7" if cfg.linear else f"sr {cfg.sr_ratios[s]}"
            keys += " (and the CLS)" if cfg.cls_last and s == cfg.num_stages - 1 else ""
            lines.append(
                f"stage {s}: {cfg.depths[s]} blocks, width {cfg.dims[s]}, {cfg.heads[s]} "
                f"heads, keys {keys}, MLP {cfg.mlp_hidden_dims[s]}"
            )
    if getattr(cfg, "cls_last", False):
        lines.append(f"classes: {cfg.num_classes}; a CLS token joins in the last stage (the head "
                     "reads it after the final norm)")  # fmt: skip
    else:
        lines.append(f"classes: {cfg.num_classes}; no prefix tokens (the head reads the mean of "
                     "the last stage's tokens)")  # fmt: skip
    return staged_model_shape(
        loaded,
        kind,
        lines,
        heads=max(cfg.heads),
        num_prefix_tokens=0,
        headline=f"{cfg.depth} blocks, {min(cfg.heads)}–{max(cfg.heads)} heads",
    )


def thumbnail_grid(a: PyramidAnalysis) -> tuple[tuple[int, int], int]:
    """The finest stage grid at most THUMB_MAX_CELLS a side that covers the first exactly."""
    h0, w0 = a.stage_grids[0]
    p0 = a.stage_pixels[0]
    for grid, px in zip(a.stage_grids, a.stage_pixels, strict=True):
        exact = grid[0] * px == h0 * p0 and grid[1] * px == w0 * p0
        if exact and max(grid) <= THUMB_MAX_CELLS:
            return tuple(grid), px
    return (h0, w0), p0


def query_maps(session: Session, query: tuple[int, int] | None) -> QueryMaps:
    """Every block's and head's row of the query at the thumbnail grid, their mean, and every
    block's rows at its own grid."""
    from vitviz.kinds.pyramid.methods import block_rows, token_of

    a = session.analysis

    def layer_rows(b: int) -> LayerRows:
        token = None if query is None else token_of(a, a.block_stages[b], query)
        rows = block_rows(a, b, token).float().cpu().numpy()  # (heads, H_s, W_s)
        # the keys' grid: a Hiera pooling block's is the stage before
        px = a.stage_pixels[a.stage_grids.index(tuple(rows.shape[1:]))]
        return LayerRows(rows, px, -1 if token is None else token)

    return staged_query_maps(a, query, thumbnail_grid(a), 0, layer_rows)
