"""What the engine asks of a PiT, as plain numpy for the window (no Qt, no workers).

A query is a cell of the first stage's grid (row, col); in every block it is the patch of the
block's stage covering the cell's centre, and its row over the block's patches
(``methods.block_rows``) is drawn at the block's grid in the big map and, resampled nearest to
the thumbnail grid, in the head grid. Without a query: the CLS token's row. The row's share on
the prefix tokens is ``prefix_attention``.
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
    lines = [
        f"stem kernel {cfg.patch_size}, stride {cfg.stride}, trained at {size}; "
        + prepared_words(loaded)
    ]
    for s in range(cfg.num_stages):
        h, w = grids[s]
        lines.append(
            f"stage {s}: {cfg.depths[s]} blocks, width {cfg.dims[s]}, {cfg.heads[s]} heads, "
            f"{h}×{w} patches, MLP {cfg.mlp_hidden_dims[s]}"
        )
    tokens = "CLS and distillation token" if cfg.num_tokens == 2 else "CLS token"
    lines.append(f"classes: {cfg.num_classes}; prefix: {tokens} through every stage")
    return staged_model_shape(
        loaded,
        kind,
        lines,
        heads=max(cfg.heads),
        num_prefix_tokens=int(cfg.num_tokens),
        headline=f"{cfg.depth} blocks, {min(cfg.heads)}–{max(cfg.heads)} heads",
    )


# the first stage's grid when it is at most THUMB_MAX_CELLS a side, else the finest that is
thumbnail_grid = finest_thumbnail


def query_maps(session: Session, query: tuple[int, int] | None) -> QueryMaps:
    """Every block's and head's row of the query at the thumbnail grid, their mean, every
    block's rows at its own grid and their share on the prefix tokens."""
    from vitviz.kinds.pit.methods import query_row, token_of

    a = session.analysis
    P = a.num_prefix_tokens

    def layer_rows(b: int) -> LayerRows:
        s = a.block_stages[b]
        token = -1 if query is None else token_of(a, s, query)
        row = a.attentions[b][:, query_row(a, b, query)].float().cpu().numpy()  # (heads, P+N)
        rows = row[:, P:].reshape(-1, *a.stage_grids[s])
        return LayerRows(rows, a.stage_pixels[s], token, row[:, :P])

    return staged_query_maps(a, query, thumbnail_grid(a), P, layer_rows)
