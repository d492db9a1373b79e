"""What the engine asks of a VOLO, as plain numpy for the window (no Qt, no workers).

A query is a cell of stage 0's grid (row, col). Each layer's row (``methods.layer_rows``: an
outlooker's folded row on stage 0's grid, a transformer block's on the half grid, a class
block's CLS row) is drawn at its grid in the big map and, resampled nearest to the thumbnail
grid, in the head grid; a class block's share on the CLS key is ``prefix_attention`` (NaN for
the other layers: they have no prefix key).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vitviz.kindapi.protocol import ModelKind, ModelShape, QueryMaps, Session
from vitviz.kinds.volo.analysis import VOLOAnalysis

THUMB_MAX_CELLS = 32


def model_shape(loaded: Any, kind: ModelKind) -> ModelShape:
    cfg = loaded.model.config
    prepared = f"images prepared at {'×'.join(map(str, loaded.preprocessing.image_size))}"
    (h0, w0), (h1, w1) = cfg.stage_grids()
    lines = [
        f"architecture: {kind.architecture(loaded.model)}",
        f"input {cfg.image_size[0]}×{cfg.image_size[1]}; {prepared}",
        f"stage 0: {cfg.depths[0]} outlookers on {h0}×{w0}, width {cfg.dims[0]}, "
        f"{cfg.heads[0]} heads",
        f"stages 1–{cfg.num_stages - 1}: {sum(cfg.depths[1:])} transformer blocks on {h1}×{w1}, "
        f"width {cfg.dims[1]}, heads {'-'.join(map(str, cfg.heads[1:]))}",
        f"{cfg.class_blocks} class blocks; classes: {cfg.num_classes}",
        "parts: " + "; ".join(kind.parts(loaded.model)),
    ]
    return ModelShape(
        depth=cfg.depth,
        heads=max(cfg.heads),
        num_prefix_tokens=0,
        config=cfg.to_dict(),
        headline=f"{cfg.depth} attention layers (outlook, self, class), {max(cfg.heads)} heads",
        architecture=tuple(lines),
    )


def thumbnail_grid(a: VOLOAnalysis) -> tuple[tuple[int, int], int]:
    """Stage 0's grid when it is at most THUMB_MAX_CELLS a side, else the half grid."""
    for grid, px in zip(a.stage_grids, a.stage_pixels, strict=True):
        if max(grid) <= THUMB_MAX_CELLS:
            return tuple(grid), px  # type: ignore[return-value]
    return tuple(a.stage_grids[-1]), a.stage_pixels[-1]  # type: ignore[return-value]


def query_maps(session: Session, query: tuple[int, int] | None) -> QueryMaps:
    """Every layer's and head's row of the query at the thumbnail grid, their mean, every
    layer's rows at its grid and a class block's share on the CLS key."""
    import torch

    from vitviz.imaging.colormaps import nice_levels
    from vitviz.kinds.kind_methods import token_under
    from vitviz.kinds.volo.methods import layer_rows

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
        cls = a.layer_kinds[i] == "class"
        tokens.append(-1 if query is None or cls else token_under(a, s, query))
        with torch.no_grad():
            rows = layer_rows(a, i, query).float().cpu().numpy()  # (heads, H, W)
            if cls:
                prefix[i, : rows.shape[0], 0] = a.attentions[i][:, 0, 0].float().cpu().numpy()
        layer_maps.append(rows)
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
