"""What the engine asks of a pyramid ViT, as plain numpy for the window (no Qt, no workers).

A query is a cell of the first stage's grid (row, col); in every block it is the token of the
block's stage covering the cell's centre, and its row (keys spread over the tokens they are made
of, ``methods.block_rows``) is drawn at the block's grid in the big map and, resampled nearest
to the thumbnail grid, in the head grid. Without a query: the mean row over every query.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from torch import nn

from vitviz.kindapi.protocol import (
    ImageNumbers,
    ModelKind,
    ModelShape,
    QueryMaps,
    Session,
    ViewWords,
)
from vitviz.kinds.pyramid import hiera_words
from vitviz.kinds.pyramid.analysis import ModelOnly, PyramidAnalysis
from vitviz.kinds.pyramid.hiera_config import HieraConfig

THUMB_MAX_CELLS = 32


def has_head(model: nn.Module) -> bool:
    return int(model.config.num_classes) > 0


def model_shape(loaded: Any, kind: ModelKind) -> ModelShape:
    cfg = loaded.model.config
    config = cfg.to_dict()
    size = "×".join(map(str, cfg.image_size))
    prepared = f"images prepared at {'×'.join(map(str, loaded.preprocessing.image_size))}"
    lines = [f"architecture: {kind.architecture(loaded.model)}"]
    if isinstance(cfg, HieraConfig):
        lines += hiera_words.stage_lines(cfg)
        lines[1] += f"; {prepared}"
    else:
        lines.append(
            f"stem stride {cfg.patch_size} (kernel {cfg.stem_kernel}), trained at {size}; "
            + prepared
        )
        for s in range(cfg.num_stages):
            keys = "pooled to 7×7" if cfg.linear else f"sr {cfg.sr_ratios[s]}"
            lines.append(
                f"stage {s}: {cfg.depths[s]} blocks, width {cfg.dims[s]}, {cfg.heads[s]} "
                f"heads, keys {keys}, MLP {cfg.mlp_hidden_dims[s]}"
            )
    lines.append(f"classes: {cfg.num_classes}; no prefix tokens (the head reads the mean of the "
                 "last stage's tokens)")  # fmt: skip
    lines.append("parts: " + "; ".join(kind.parts(loaded.model)))
    return ModelShape(
        depth=cfg.depth,
        heads=max(cfg.heads),
        num_prefix_tokens=0,
        config=config,
        headline=f"{cfg.depth} blocks, {min(cfg.heads)}–{max(cfg.heads)} heads",
        architecture=tuple(lines),
    )


def unavailable(loaded: Any) -> dict[str, str]:
    """{method name: why it can't run here} over the whole table."""
    from vitviz.explain.methods import all_methods

    head = has_head(loaded.model) and bool(loaded.class_names)
    out = {}
    for m in all_methods():
        why = m.unavailable_on(loaded.model, head, kind=loaded.kind)
        if why is not None:
            out[m.name] = why
    return out


def thumbnail_grid(a: PyramidAnalysis) -> tuple[tuple[int, int], int]:
    """The finest stage grid at most THUMB_MAX_CELLS a side that covers the first exactly."""
    h0, w0 = a.stage_grids[0]
    p0 = a.stage_pixels[0]
    for grid, px in zip(a.stage_grids, a.stage_pixels, strict=True):
        exact = grid[0] * px == h0 * p0 and grid[1] * px == w0 * p0
        if exact and max(grid) <= THUMB_MAX_CELLS:
            return tuple(grid), px
    return (h0, w0), p0


def words(a: PyramidAnalysis) -> ViewWords:
    h0, w0 = a.stage_grids[0]
    last = len(a.stage_grids) - 1  # stages counted from 0
    hl, wl = a.stage_grids[-1]
    over = f"over stage 0's {h0}×{w0} tokens"
    return ViewWords(
        layer="block",
        axis="block (stage.block)",
        head="head {head} of 0–{last}",
        query_none="average pool (every token)",
        query_cell="point y {y:.0f}, x {x:.0f} px",
        title_query_none="query: mean over the tokens",
        title_query="query token ({trow}, {tcol}) of {th}×{tw}",
        method_query_none=f"from the mean of the last stage's tokens · {over}",
        method_query=f"from stage {last}'s token ({{trow}}, {{tcol}}) · {over}",
        method_fixed={"gradcam": f"stage {last}'s {hl}×{wl} tokens"},
    )


def image_numbers(session: Session, kind: ModelKind) -> ImageNumbers:
    from vitviz.explain.methods import ignored_parameters

    loaded, a = session.loaded, session.analysis
    head = has_head(loaded.model)
    rows = kind.layer_rows(a)
    stats = kind.head_statistics(a)
    thumb, thumb_px = thumbnail_grid(a)
    return ImageNumbers(
        input_pixels=np.ascontiguousarray(a.pixels, dtype=np.uint8),
        grid=tuple(a.stage_grids[0]),
        patch_size=a.patch_size,
        num_prefix_tokens=0,
        num_layers=len(rows),
        num_heads=max(r.heads for r in rows),
        class_names=list(loaded.class_names) if head else [],
        probs=a.probs.float().cpu().numpy(),
        logits=a.logits.float().cpu().numpy(),
        top_class=a.target_class if head else -1,
        mean_distance=stats["distance"],
        entropy=stats["entropy"],
        prefix_share=stats["prefix_share"],
        token_norms=np.zeros((len(rows), 0), dtype=np.float32),
        device=str(next(loaded.model.parameters()).device),
        attention=None,
        unavailable=unavailable(loaded),
        ignored_params=ignored_parameters(kind),
        thumb_grid=thumb,
        thumb_pixels=thumb_px,
        layer_rows=rows,
        token_geometry=kind.token_geometry(a),
        words=words(a),
    )


def query_maps(session: Session, query: tuple[int, int] | None) -> QueryMaps:
    """Every block's and head's row of the query at the thumbnail grid, their mean, and every
    block's rows at its own grid."""
    import torch

    from vitviz.imaging.colormaps import nice_levels
    from vitviz.kinds.pyramid.methods import block_rows, token_of

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
        token = None if query is None else token_of(a, s, query)
        tokens.append(-1 if token is None else token)
        with torch.no_grad():
            rows = block_rows(a, b, token).float().cpu().numpy()  # (heads, H_s, W_s)
        layer_maps.append(rows)
        H, W = rows.shape[1:]  # the keys' grid: a Hiera pooling block's is the stage before
        px = a.stage_pixels[a.stage_grids.index((H, W))]
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


def default_class(session: Session) -> int:
    return session.analysis.target_class if has_head(session.loaded.model) else -1


def method_map(
    session: Session,
    method: str,
    query: tuple[int, int] | None,
    target_class: int | None,
    params: Mapping[str, Any],
) -> np.ndarray:
    """The table's map through the method table (its checks, then this kind's version)."""
    from vitviz.explain.methods import get_method

    target = default_class(session) if target_class is None else target_class
    m = get_method(method)
    out = m(session.analysis, query, target if target >= 0 else None, dict(params), strict=False)
    return out.numpy()


def evaluate_faithfulness(
    session: Session,
    names: Sequence[str],
    *,
    steps: int,
    mask: np.ndarray | None,
    name: str,
    params: Mapping[str, Mapping[str, Any]],
) -> Any:
    from vitviz.explain.faithfulness import evaluate_methods

    a, model = session.analysis, session.loaded.model
    if not has_head(model):
        raise ValueError("faithfulness needs a classification head, and this model has none")
    if a.loaded is None or a.loaded.model is not model:
        a = replace(a, loaded=ModelOnly(model))
    return evaluate_methods(a, list(names), steps=steps, mask=mask, name=name, params=params)


def export_npz(
    session: Session,
    path: Path,
    method: str,
    params: Mapping[str, Any],
    target_class: int | None,
) -> Path:
    """``vitviz-cli explain``'s npz with the shown method (its parameters, the chosen class)."""
    from vitviz.explain.methods import get_method
    from vitviz.pipeline.export import MapSettings, compute_maps, write_npz

    loaded, a, kind = session.loaded, session.analysis, session.kind
    head = has_head(loaded.model)
    m = get_method(method)
    usable = m.unavailable_on(loaded.model, head, kind=kind) is None
    methods = (method,) if usable and method not in ("rollout", "attention") else ()
    layers, heads = kind.parameter_bounds(loaded.model)
    given = {method: params} if usable else {}
    values = {
        n: get_method(n).values_for(kind, given.get(n), layers, heads, strict=False)
        for n in ("rollout", *methods)
    }
    settings = MapSettings(methods=methods, params=values, target_class=target_class)
    return write_npz(a, compute_maps(a, settings), path, loaded.class_names)


def picture(a: PyramidAnalysis, values: np.ndarray, colormap: str, opacity: float) -> Image.Image:
    """A map of any of the model's grids over the model input (taken to the first stage's grid,
    each cell the value of the token covering its centre)."""
    import torch

    from vitviz.imaging.overlay import overlay_on_image
    from vitviz.kindapi import get_kind

    geometry = get_kind(a.kind).token_geometry(a)  # the kind it carries by name
    fine = geometry.on_grid(torch.as_tensor(np.asarray(values))).numpy()
    return overlay_on_image(a.pixels, fine, colormap=colormap, opacity=opacity)


def heads_picture(
    session: Session,
    query: tuple[int, int] | None,
    colormap: str,
    opacity: float,
    per_head: bool,
    labels: Sequence[str],
) -> Image.Image:
    from vitviz.pipeline.export import heads_figure

    shown = query_maps(session, query)
    said = "query: mean over the tokens" if query is None else f"query cell {query}"
    return heads_figure(
        shown.head_maps,
        shown.mean_maps,
        session.analysis,
        row_names=list(labels),
        title="Spatial-reduction attention of every block and head",
        query=said,
        colormap=colormap,
        opacity=opacity,
        per_head=per_head,
    )
