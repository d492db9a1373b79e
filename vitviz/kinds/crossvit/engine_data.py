"""What the engine asks of a CrossViT, as plain numpy for the window (no Qt, no workers).

A query is a cell of branch 0's grid (row, col). In a ViT block it is the patch of the block's
branch covering the cell's centre; a cross-attention layer's one query is its CLS. Each layer's
row over its key branch's patches (``methods.layer_rows``) is drawn at that branch's grid in the
big map and, resampled nearest to the thumbnail grid, in the head grid; its share on the CLS
key is ``prefix_attention``.
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
    lines = [f"input {cfg.image_size[0]}×{cfg.image_size[1]}; {prepared_words(loaded)}"]
    for b in range(2):
        h, w = cfg.grid(b)
        lines.append(
            f"branch {b}: image {cfg.branch_sizes[b]} px, patches {cfg.patch_sizes[b]}, "
            f"{h}×{w} grid, width {cfg.dims[b]}, {cfg.heads[b]} heads, MLP {cfg.mlp_hidden_dims[b]}"
        )
    depths = ", ".join(f"{d[0]}+{d[1]}" for d in cfg.block_depths)
    lines.append(f"multi-scale blocks (branch 0 + branch 1 blocks, then 2 cross): {depths}")
    lines.append(f"classes: {cfg.num_classes}; the mean of the two branches' heads")
    return staged_model_shape(
        loaded,
        kind,
        lines,
        heads=max(cfg.heads),
        num_prefix_tokens=1,
        headline=f"{cfg.depth} attention layers (two branches), {max(cfg.heads)} heads",
    )


# branch 0's grid when it is at most THUMB_MAX_CELLS a side, else branch 1's
thumbnail_grid = finest_thumbnail


def query_maps(session: Session, query: tuple[int, int] | None) -> QueryMaps:
    """Every layer's and head's row of the query at the thumbnail grid, their mean, every
    layer's rows at its key grid and their share on the CLS key."""
    from vitviz.kinds.crossvit.methods import query_row, token_of

    a = session.analysis

    def layer_rows(i: int) -> LayerRows:
        s = a.block_stages[i]
        cross = a.layer_kinds[i] == "cross"
        token = -1 if query is None or cross else token_of(a, s, query)
        row = a.attentions[i][:, query_row(a, i, query)].float().cpu().numpy()  # (heads, 1+N)
        rows = row[:, 1:].reshape(-1, *a.stage_grids[s])
        return LayerRows(rows, a.stage_pixels[s], token, row[:, :1])

    return staged_query_maps(a, query, thumbnail_grid(a), 1, layer_rows)
