"""What the engine asks of a CrossViT, as plain numpy for the window (no Qt, no workers).

A query is a cell of branch 0's grid (row, col). In a ViT block it is the patch of the block's
branch covering the cell's centre; a cross-attention layer's one query is its CLS. Each layer's
row over its key branch's patches (``methods.layer_rows``) is drawn at that branch's grid in the
big map and, resampled nearest to the thumbnail grid, in the head grid; its share on the CLS
key is ``prefix_attention``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vitviz.kindapi.protocol import ModelKind, ModelShape, QueryMaps, Session
from vitviz.kinds.crossvit.analysis import CrossViTAnalysis

THUMB_MAX_CELLS = 32


def model_shape(loaded: Any, kind: ModelKind) -> ModelShape:
    cfg = loaded.model.config
    prepared = f"images prepared at {'×'.join(map(str, loaded.preprocessing.image_size))}"
    lines = [
        f"architecture: {kind.architecture(loaded.model)}",
        f"input {cfg.image_size[0]}×{cfg.image_size[1]}; {prepared}",
    ]
    for b in range(2):
        h, w = cfg.grid(b)
        lines.append(
            f"branch {b}: image {cfg.branch_sizes[b]} px, patches {cfg.patch_sizes[b]}, "
            f"{h}×{w} grid, width {cfg.dims[b]}, {cfg.heads[b]} heads, MLP {cfg.mlp_hidden_dims[b]}"
        )
    depths = ", ".join(f"{d[0]}+{d[1]}" for d in cfg.block_depths)
    lines.append(f"multi-scale blocks (branch 0 + branch 1 blocks, then 2 cross): {depths}")
    lines.append(f"classes: {cfg.num_classes}; the mean of the two branches' heads")
    lines.append("parts: " + "; ".join(kind.parts(loaded.model)))
    return ModelShape(
        depth=cfg.depth,
        heads=max(cfg.heads),
        num_prefix_tokens=1,
        config=cfg.to_dict(),
        headline=f"{cfg.depth} attention layers (two branches), {max(cfg.heads)} heads",
        architecture=tuple(lines),
    )


def thumbnail_grid(a: CrossViTAnalysis) -> tuple[tuple[int, int], float]:
    """Branch 0's grid when it is at most THUMB_MAX_CELLS a side, else branch 1's."""
    for grid, px in zip(a.stage_grids, a.stage_pixels, strict=True):
        if max(grid) <= THUMB_MAX_CELLS:
            return tuple(grid), px  # type: ignore[return-value]
    return tuple(a.stage_grids[-1]), a.stage_pixels[-1]  # type: ignore[return-value]


def query_maps(session: Session, query: tuple[int, int] | None) -> QueryMaps:
    """Every layer's and head's row of the query at the thumbnail grid, their mean, every
    layer's rows at its key grid and their share on the CLS key."""
    import torch

    from vitviz.imaging.colormaps import nice_levels
    from vitviz.kinds.crossvit.methods import query_row, token_of

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
    prefix = np.full((L, most, 1), np.nan, dtype=np.float32)
    layer_maps, tokens = [], []
    lo, hi = np.inf, -np.inf
    for i in range(L):
        s = a.block_stages[i]
        H, W = a.stage_grids[s]
        cross = a.layer_kinds[i] == "cross"
        tokens.append(-1 if query is None or cross else token_of(a, s, query))
        with torch.no_grad():
            row = a.attentions[i][:, query_row(a, i, query)].float().cpu().numpy()  # (heads, 1+N)
        rows = row[:, 1:].reshape(-1, H, W)
        layer_maps.append(rows)
        prefix[i, : row.shape[0]] = row[:, :1]
        px = a.stage_pixels[s]
        ys = np.minimum(((np.arange(thumb[0]) + 0.5) * thumb_px // px).astype(int), H - 1)
        xs = np.minimum(((np.arange(thumb[1]) + 0.5) * thumb_px // px).astype(int), W - 1)
        small = rows[:, ys[:, None], xs[None, :]]
        head_maps[i, : rows.shape[0]] = small
        mean_maps[i] = small.mean(axis=0)
        lo, hi = min(lo, float(rows.min())), max(hi, float(rows.max()))
    return QueryMaps(
        head_maps=head_maps,
        mean_maps=mean_maps,
        layer_maps=tuple(layer_maps),
        prefix_attention=prefix,
        query_tokens=tuple(tokens),
        levels=nice_levels(np.array([lo, hi])),
    )
