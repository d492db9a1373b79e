"""What the engine asks of a MobileViT, as plain numpy for the window (no Qt, no workers).

A query is a cell of the first MobileViT block's feature grid (row, col); in every layer it is
the feature pixel of the layer's stage covering the cell's centre, and its row
(``methods.layer_rows``: its offset's sequence, its patch's row over every patch) is drawn on
the stage's patch grid in the big map and, resampled nearest to the thumbnail grid, in the
head grid. Without a query: the mean row over every offset and patch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vitviz.kindapi.protocol import ModelKind, ModelShape, QueryMaps, Session
from vitviz.kinds.mobilevit.analysis import MobileViTAnalysis


def model_shape(loaded: Any, kind: ModelKind) -> ModelShape:
    cfg = loaded.model.config
    size = "×".join(map(str, cfg.image_size))
    prepared = f"images prepared at {'×'.join(map(str, loaded.preprocessing.image_size))}"
    lines = [f"architecture: {kind.architecture(loaded.model)}", f"input {size}; {prepared}"]
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
    lines.append("parts: " + "; ".join(kind.parts(loaded.model)))
    heads = cfg.layer_heads
    return ModelShape(
        depth=cfg.depth,
        heads=max(heads),
        num_prefix_tokens=0,
        config=cfg.to_dict(),
        headline=f"{cfg.depth} transformer layers, {max(heads)} heads",
        architecture=tuple(lines),
    )


def thumbnail_grid(a: MobileViTAnalysis) -> tuple[tuple[int, int], int]:
    """The first block's patch grid (every layer's map is on a patch grid this or coarser)."""
    return tuple(a.patch_grids[0]), a.patch * a.stage_pixels[0]


def query_maps(session: Session, query: tuple[int, int] | None) -> QueryMaps:
    """Every layer's and head's row of the query at the thumbnail grid, their mean, and every
    layer's rows on its patch grid."""
    import torch

    from vitviz.imaging.colormaps import nice_levels
    from vitviz.kinds.mobilevit.methods import layer_rows

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
        s = a.block_stages[b]
        tokens.append(-1 if query is None else a.offset_and_patch(b, query)[1])
        with torch.no_grad():
            rows = layer_rows(a, b, query).float().cpu().numpy()  # (heads, nh, nw)
        layer_maps.append(rows)
        H, W = rows.shape[1:]
        px = a.patch * a.stage_pixels[s]
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
