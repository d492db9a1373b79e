"""What the engine asks of a LeViT, as plain numpy for the window (no Qt, no workers).

A query is a cell of the first stage's grid (row, col); in every layer it is the token of the
layer's queries' stage covering the cell's centre, and its row (``methods.block_rows``) is drawn
on the layer's keys' grid in the big map (a subsample's: the stage before's, finer) and,
resampled nearest to the thumbnail grid, in the head grid. Without a query: the mean row over
every query.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vitviz.kindapi.protocol import ModelKind, ModelShape, QueryMaps, Session
from vitviz.kinds.levit.analysis import LeViTAnalysis

THUMB_MAX_CELLS = 32


def model_shape(loaded: Any, kind: ModelKind) -> ModelShape:
    cfg = loaded.model.config
    size = "×".join(map(str, cfg.image_size))
    prepared = f"images prepared at {'×'.join(map(str, loaded.preprocessing.image_size))}"
    grids = cfg.stage_grids()
    lines = [
        f"architecture: {kind.architecture(loaded.model)}",
        f"stem stride {cfg.stem_stride}, trained at {size}; {prepared}",
    ]
    for s in range(cfg.num_stages):
        h, w = grids[s]
        down = f"subsample attention ({cfg.down_heads(s)} heads), " if s else ""
        lines.append(
            f"stage {s}: {down}{cfg.depths[s]} blocks, width {cfg.dims[s]}, {cfg.heads[s]} "
            f"heads, {h}×{w} tokens, MLP {cfg.mlp_hidden_dims[s]}"
        )
    lines.append(f"classes: {cfg.num_classes}; no prefix tokens (the head reads the mean of the "
                 "last stage's tokens)")  # fmt: skip
    lines.append("parts: " + "; ".join(kind.parts(loaded.model)))
    heads = cfg.layer_heads
    return ModelShape(
        depth=cfg.depth,
        heads=max(heads),
        num_prefix_tokens=0,
        config=cfg.to_dict(),
        headline=f"{cfg.depth} attention layers, {min(heads)}–{max(heads)} heads",
        architecture=tuple(lines),
    )


def thumbnail_grid(a: LeViTAnalysis) -> tuple[tuple[int, int], int]:
    """The first stage's grid when it is at most THUMB_MAX_CELLS a side, else the finest stage
    grid that is."""
    for grid, px in zip(a.stage_grids, a.stage_pixels, strict=True):
        if max(grid) <= THUMB_MAX_CELLS:
            return tuple(grid), px
    return tuple(a.stage_grids[-1]), a.stage_pixels[-1]


def query_maps(session: Session, query: tuple[int, int] | None) -> QueryMaps:
    """Every layer's and head's row of the query at the thumbnail grid, their mean, and every
    layer's rows on its keys' grid."""
    import torch

    from vitviz.imaging.colormaps import nice_levels
    from vitviz.kinds.levit.methods import block_rows, token_of

    a = session.analysis
    if query is not None:
        h0, w0 = a.stage_grids[0]
        if not (0 <= query[0] < h0 and 0 <= query[1] < w0):
            raise ValueError(f"query {query} is outside the {h0}×{w0} grid")
    thumb, thumb_px = thumbnail_grid(a)
    L = len(a.attentions)
    most = max(int(t.shape[0]) for t in a.attentions)
    head_maps = np.full((L, most, *thumb), np.nan, dtype=np.float32)
    mean_maps = np.empty((L, *thumb), dtype=np.float32)
    layer_maps, tokens = [], []
    lo, hi = np.inf, -np.inf
    for b in range(L):
        token = None if query is None else token_of(a, a.block_stages[b], query)
        tokens.append(-1 if token is None else token)
        with torch.no_grad():
            rows = block_rows(a, b, token).float().cpu().numpy()  # (heads, h_k, w_k)
        layer_maps.append(rows)
        H, W = rows.shape[1:]
        px = a.stage_pixels[a.key_stages[b]]
        ys = np.minimum(((np.arange(thumb[0]) + 0.5) * thumb_px // px).astype(int), H - 1)
        xs = np.minimum(((np.arange(thumb[1]) + 0.5) * thumb_px // px).astype(int), W - 1)
        small = rows[:, ys[:, None], xs[None, :]]
        head_maps[b, : rows.shape[0]] = small
        mean_maps[b] = small.mean(axis=0)
        lo, hi = min(lo, float(rows.min())), max(hi, float(rows.max()))
    return QueryMaps(
        head_maps=head_maps,
        mean_maps=mean_maps,
        layer_maps=tuple(layer_maps),
        prefix_attention=np.zeros((L, most, 0), dtype=np.float32),
        query_tokens=tuple(tokens),
        levels=nice_levels(np.array([lo, hi])),
    )
