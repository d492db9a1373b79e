"""What the engine asks of an MViTv2, as plain numpy for the window (no Qt, no workers).

A query is a cell of the first stage's grid (row, col); in every block it is the query token of
the block's stage covering the cell's centre, and its row over the block's pooled keys
(``methods.block_rows``) is drawn at the block's key grid in the big map (each key over its
stride's square of the input) and, resampled nearest to the thumbnail grid, in the head grid.
Without a query: the CLS token's row, or (no CLS) the mean row over every query. The row's
share on the CLS key is ``prefix_attention``.
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
    lines = [
        f"stem kernel {cfg.patch_kernel[0]}, stride {cfg.patch_size}, trained at {size} "
        f"(its relative position tables fix the size); {prepared_words(loaded)}",
    ]
    plans = cfg.blocks()
    for s in range(cfg.num_stages):
        ps = [p for p in plans if p.stage == s]
        h, w = ps[0].grid_q
        keys = sorted({"×".join(map(str, p.grid_kv)) for p in ps})
        lines.append(
            f"stage {s}: {cfg.depths[s]} blocks, width {ps[-1].dim_out}, {cfg.heads[s]} heads, "
            f"{h}×{w} queries, keys pooled to {', '.join(keys)}"
        )
    tokens = "a CLS token through every block" if cfg.use_cls_token else "no CLS token"
    lines.append(f"classes: {cfg.num_classes}; {tokens}")
    return staged_model_shape(
        loaded,
        kind,
        lines,
        heads=max(cfg.heads),
        num_prefix_tokens=cfg.num_prefix_tokens,
        headline=f"{cfg.depth} blocks, {min(cfg.heads)}–{max(cfg.heads)} heads",
    )


# the finest stage grid at most THUMB_MAX_CELLS a side
thumbnail_grid = finest_thumbnail


def query_maps(session: Session, query: tuple[int, int] | None) -> QueryMaps:
    """Every block's and head's row of the query at the thumbnail grid, their mean, every
    block's rows at its key grid and their share on the CLS key."""
    from vitviz.kinds.mvit.methods import block_rows, token_of

    a = session.analysis
    P = a.num_prefix_tokens

    def layer_rows(b: int) -> LayerRows:
        token = -1 if query is None else token_of(a, a.block_stages[b], query)
        rows = block_rows(a, b, query).float().cpu().numpy()  # (heads, kh, kw)
        prefix = None
        if P:
            attn = a.attentions[b]
            row = attn[:, 0] if query is None else attn[:, P + token]
            prefix = row[:, :P].float().cpu().numpy()
        return LayerRows(rows, a.key_pixels[b], token, prefix)

    return staged_query_maps(a, query, thumbnail_grid(a), P, layer_rows)
