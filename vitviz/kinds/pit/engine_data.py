"""What the engine asks of a PiT, as plain numpy for the window (no Qt, no workers).

A query is a cell of the first stage's grid (row, col); in every block it is the patch of the
block's stage covering the cell's centre, and its row over the block's patches
(``methods.block_rows``) is drawn at the block's grid in the big map and, resampled nearest to
the thumbnail grid, in the head grid. Without a query: the CLS token's row. The row's share on
the prefix tokens is ``prefix_attention``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vitviz.kindapi.protocol import ModelKind, ModelShape, QueryMaps, Session
from vitviz.kinds.pit.analysis import PiTAnalysis

THUMB_MAX_CELLS = 32


def model_shape(loaded: Any, kind: ModelKind) -> ModelShape:
    cfg = loaded.model.config
    size = "×".join(map(str, cfg.image_size))
    prepared = f"images prepared at {'×'.join(map(str, loaded.preprocessing.image_size))}"
    grids = cfg.stage_grids()
    lines = [
        f"architecture: {kind.architecture(loaded.model)}",
        f"stem kernel {cfg.patch_size}, stride {cfg.stride}, trained at {size}; {prepared}",
    ]
    for s in range(cfg.num_stages):
        h, w = grids[s]
        lines.append(
            f"stage {s}: {cfg.depths[s]} blocks, width {cfg.dims[s]}, {cfg.heads[s]} heads, "
            f"{h}×{w} patches, MLP {cfg.mlp_hidden_dims[s]}"
        )
    tokens = "CLS and distillation token" if cfg.num_tokens == 2 else "CLS token"
    lines.append(f"classes: {cfg.num_classes}; prefix: {tokens} through every stage")
    lines.append("parts: " + "; ".join(kind.parts(loaded.model)))
    return ModelShape(
        depth=cfg.depth,
        heads=max(cfg.heads),
        num_prefix_tokens=int(cfg.num_tokens),
        config=cfg.to_dict(),
        headline=f"{cfg.depth} blocks, {min(cfg.heads)}–{max(cfg.heads)} heads",
        architecture=tuple(lines),
    )


def thumbnail_grid(a: PiTAnalysis) -> tuple[tuple[int, int], int]:
    """The first stage's grid when it is at most THUMB_MAX_CELLS a side, else the finest stage
    grid that is."""
    for grid, px in zip(a.stage_grids, a.stage_pixels, strict=True):
        if max(grid) <= THUMB_MAX_CELLS:
            return tuple(grid), px
    return tuple(a.stage_grids[-1]), a.stage_pixels[-1]


def query_maps(session: Session, query: tuple[int, int] | None) -> QueryMaps:
    """Every block's and head's row of the query at the thumbnail grid, their mean, every
    block's rows at its own grid and their share on the prefix tokens."""
    import torch

    from vitviz.imaging.colormaps import nice_levels
    from vitviz.kinds.pit.methods import query_row, token_of

    a = session.analysis
    if query is not None:
        h0, w0 = a.stage_grids[0]
        if not (0 <= query[0] < h0 and 0 <= query[1] < w0):
            raise ValueError(f"query {query} is outside the {h0}×{w0} grid")
    thumb, thumb_px = thumbnail_grid(a)
    L, P = len(a.attentions), a.num_prefix_tokens
    most = max(int(t.shape[0]) for t in a.attentions)
    head_maps = np.full((L, most, *thumb), np.nan, dtype=np.float32)
    mean_maps = np.empty((L, *thumb), dtype=np.float32)
    prefix = np.full((L, most, P), np.nan, dtype=np.float32)
    layer_maps, tokens = [], []
    lo, hi = np.inf, -np.inf
    for b in range(L):
        s = a.block_stages[b]
        H, W = a.stage_grids[s]
        tokens.append(-1 if query is None else token_of(a, s, query))
        with torch.no_grad():
            row = a.attentions[b][:, query_row(a, b, query)].float().cpu().numpy()  # (heads, P+N)
        rows = row[:, P:].reshape(-1, H, W)
        layer_maps.append(rows)
        prefix[b, : row.shape[0]] = row[:, :P]
        px = a.stage_pixels[s]
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
        prefix_attention=prefix,
        query_tokens=tuple(tokens),
        levels=nice_levels(np.array([lo, hi])),
    )
