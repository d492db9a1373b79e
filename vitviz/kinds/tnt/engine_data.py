"""What the engine asks of a TNT, as plain numpy for the window (no Qt, no workers).

A query is a cell of the patch grid (row, col); in every block its row of the outer attention
over the patch keys (``methods.block_rows``) is drawn on the patch grid in the big map and the
head grid. Without a query: the CLS token's row. The row's share on the CLS key is
``prefix_attention``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vitviz.kindapi.protocol import ModelKind, ModelShape, QueryMaps, Session
from vitviz.kinds.tnt.analysis import TNTAnalysis


def model_shape(loaded: Any, kind: ModelKind) -> ModelShape:
    cfg = loaded.model.config
    h, w = cfg.grid
    n = "×".join(map(str, cfg.pixel_grid))
    prepared = f"images prepared at {'×'.join(map(str, loaded.preprocessing.image_size))}"
    lines = [
        f"architecture: {kind.architecture(loaded.model)}",
        f"patch size {cfg.patch_size}, {h}×{w} patches of {n} pixel tokens, trained at "
        f"{'×'.join(map(str, cfg.image_size))} (patch_pos fixes the size); {prepared}",
        f"{cfg.depths[0]} blocks: inner width {cfg.inner_dim} with {cfg.inner_heads} heads, "
        f"outer width {cfg.embed_dim} with {cfg.heads[0]} heads",
        f"classes: {cfg.num_classes}; a CLS token",
        "parts: " + "; ".join(kind.parts(loaded.model)),
    ]
    return ModelShape(
        depth=cfg.depth,
        heads=cfg.heads[0],
        num_prefix_tokens=1,
        config=cfg.to_dict(),
        headline=f"{cfg.depth} blocks, {cfg.heads[0]} outer heads",
        architecture=tuple(lines),
    )


def thumbnail_grid(a: TNTAnalysis) -> tuple[tuple[int, int], int]:
    """The patch grid."""
    return tuple(a.stage_grids[0]), a.stage_pixels[0]


def query_maps(session: Session, query: tuple[int, int] | None) -> QueryMaps:
    """Every block's and head's row of the query on the patch grid, their mean, and their
    share on the CLS key."""
    import torch

    from vitviz.imaging.colormaps import nice_levels
    from vitviz.kinds.tnt.methods import block_rows, query_row

    a = session.analysis
    row = query_row(a, query)  # ValueError for a cell off the grid
    L = len(a.attentions)
    heads = max(int(t.shape[0]) for t in a.attentions)
    h, w = a.stage_grids[0]
    head_maps = np.full((L, heads, h, w), np.nan, dtype=np.float32)
    prefix = np.full((L, heads, 1), np.nan, dtype=np.float32)
    layer_maps = []
    with torch.no_grad():
        for b in range(L):
            rows = block_rows(a, b, query).float().cpu().numpy()  # (heads, h, w)
            head_maps[b, : rows.shape[0]] = rows
            prefix[b, : rows.shape[0], 0] = a.attentions[b][:, row, 0].float().cpu().numpy()
            layer_maps.append(rows)
    return QueryMaps(
        head_maps=head_maps,
        mean_maps=np.nanmean(head_maps, axis=1),
        layer_maps=tuple(layer_maps),
        prefix_attention=prefix,
        query_tokens=tuple([row - 1] * L),
        levels=nice_levels(
            np.array([float(head_maps[~np.isnan(head_maps)].min()), float(np.nanmax(head_maps))])
        ),
    )
