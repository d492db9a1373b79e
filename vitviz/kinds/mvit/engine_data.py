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

import numpy as np

from vitviz.kindapi.protocol import ModelKind, ModelShape, QueryMaps, Session
from vitviz.kinds.mvit.analysis import MViTAnalysis

THUMB_MAX_CELLS = 32


def model_shape(loaded: Any, kind: ModelKind) -> ModelShape:
    cfg = loaded.model.config
    size = "×".join(map(str, cfg.image_size))
    prepared = f"images prepared at {'×'.join(map(str, loaded.preprocessing.image_size))}"
    lines = [
        f"architecture: {kind.architecture(loaded.model)}",
        f"stem kernel {cfg.patch_kernel[0]}, stride {cfg.patch_size}, trained at {size} "
        f"(its relative position tables fix the size); {prepared}",
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
    lines.append("parts: " + "; ".join(kind.parts(loaded.model)))
    return ModelShape(
        depth=cfg.depth,
        heads=max(cfg.heads),
        num_prefix_tokens=cfg.num_prefix_tokens,
        config=cfg.to_dict(),
        headline=f"{cfg.depth} blocks, {min(cfg.heads)}–{max(cfg.heads)} heads",
        architecture=tuple(lines),
    )


def thumbnail_grid(a: MViTAnalysis) -> tuple[tuple[int, int], int]:
    """The finest stage grid at most THUMB_MAX_CELLS a side."""
    for grid, px in zip(a.stage_grids, a.stage_pixels, strict=True):
        if max(grid) <= THUMB_MAX_CELLS:
            return tuple(grid), px
    return tuple(a.stage_grids[-1]), a.stage_pixels[-1]


def query_maps(session: Session, query: tuple[int, int] | None) -> QueryMaps:
    """Every block's and head's row of the query at the thumbnail grid, their mean, every
    block's rows at its key grid and their share on the CLS key."""
    import torch

    from vitviz.imaging.colormaps import nice_levels
    from vitviz.kinds.mvit.methods import block_rows, token_of

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
        tokens.append(-1 if query is None else token_of(a, s, query))
        with torch.no_grad():
            rows = block_rows(a, b, query).float().cpu().numpy()  # (heads, kh, kw)
            if P:
                attn = a.attentions[b]
                row = attn[:, 0] if query is None else attn[:, P + tokens[-1]]
                prefix[b, : rows.shape[0]] = row[:, :P].float().cpu().numpy()
        layer_maps.append(rows)
        H, W = rows.shape[1:]
        px = a.key_pixels[b]
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
