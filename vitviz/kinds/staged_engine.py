"""What the staged kinds' ``engine_data`` modules share (DESIGN §3, §6): the model-shape card
around a kind's own lines (``staged_model_shape``), the thumbnail grid (``finest_thumbnail``)
and the query maps written once over each layer's rows as the kind reads them
(``staged_query_maps`` over ``LayerRows``). Plain numpy out, for the window; no Qt.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vitviz.kindapi.protocol import ModelKind, ModelShape, QueryMaps

THUMB_MAX_CELLS = 32  # the most cells a side of a head-grid thumbnail


def prepared_words(loaded: Any) -> str:
    """ "images prepared at H×W": the size the checkpoint's preprocessing gives the model."""
    return f"images prepared at {'×'.join(map(str, loaded.preprocessing.image_size))}"


def staged_model_shape(
    loaded: Any,
    kind: ModelKind,
    lines: Sequence[str],
    *,
    heads: int,
    num_prefix_tokens: int,
    headline: str,
) -> ModelShape:
    """The model-shape card of ``loaded``'s model: its architecture line, the kind's ``lines``
    (input, stages, classes), its parts line; depth and config from the model's config."""
    cfg = loaded.model.config
    return ModelShape(
        depth=cfg.depth,
        heads=heads,
        num_prefix_tokens=num_prefix_tokens,
        config=cfg.to_dict(),
        headline=headline,
        architecture=(
            f"architecture: {kind.architecture(loaded.model)}",
            *lines,
            "parts: " + "; ".join(kind.parts(loaded.model)),
        ),
    )


def finest_thumbnail(analysis: Any) -> tuple[tuple[int, int], Any]:
    """The finest of ``analysis.stage_grids`` at most THUMB_MAX_CELLS a side (else the last)
    and its cell's input pixels (``stage_pixels``)."""
    for grid, px in zip(analysis.stage_grids, analysis.stage_pixels, strict=True):
        if max(grid) <= THUMB_MAX_CELLS:
            return tuple(grid), px
    return tuple(analysis.stage_grids[-1]), analysis.stage_pixels[-1]


@dataclass(frozen=True)
class LayerRows:
    """One attention layer's rows of a query as the window draws them: ``rows`` (heads, h, w)
    on the layer's map grid, each cell ``cell_pixels`` input pixels a side; ``token`` the query
    token on the layer's grid (-1: none); ``prefix`` (heads, P) the rows' share on the prefix
    keys (None: the layer has none, NaN in ``prefix_attention``)."""

    rows: np.ndarray
    cell_pixels: float
    token: int = -1
    prefix: np.ndarray | None = None


def check_query(analysis: Any, query: tuple[int, int] | None) -> None:
    """ValueError in one line for a query cell off stage 0's grid."""
    if query is not None:
        h0, w0 = analysis.stage_grids[0]
        if not (0 <= query[0] < h0 and 0 <= query[1] < w0):
            raise ValueError(f"query {query} is outside the {h0}×{w0} grid")


def staged_query_maps(
    analysis: Any,
    query: tuple[int, int] | None,
    thumbnail: tuple[tuple[int, int], float],
    prefix_count: int,
    layer_rows: Callable[[int], LayerRows],
) -> QueryMaps:
    """Every layer's and head's row of ``query`` (a cell of stage 0's grid, None: the kind's
    row without one) resampled nearest to the ``thumbnail`` grid ((h, w), cell pixels), their
    mean over the layer's heads, every layer's rows on its own grid, their share on the
    ``prefix_count`` prefix keys and their levels. ``layer_rows(i)``: layer i's (run without
    gradients); ValueError for a query off the grid."""
    import torch

    from vitviz.imaging.colormaps import nice_levels

    check_query(analysis, query)
    thumb, thumb_px = thumbnail
    L = len(analysis.attentions)
    most = max(int(t.shape[0]) for t in analysis.attentions)
    head_maps = np.full((L, most, *thumb), np.nan, dtype=np.float32)
    mean_maps = np.empty((L, *thumb), dtype=np.float32)
    prefix = np.full((L, most, prefix_count), np.nan, dtype=np.float32)
    layer_maps, tokens = [], []
    lo, hi = np.inf, -np.inf
    for i in range(L):
        with torch.no_grad():
            layer = layer_rows(i)
        rows = layer.rows
        tokens.append(layer.token)
        layer_maps.append(rows)
        if layer.prefix is not None:
            prefix[i, : rows.shape[0]] = layer.prefix
        H, W = rows.shape[1:]
        px = layer.cell_pixels
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
