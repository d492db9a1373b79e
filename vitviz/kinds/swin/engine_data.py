"""What the engine asks of a Swin, as plain numpy for the window (no Qt, no vitviz.workers).

A query is a point of the model input; the window sends the cell of the first stage's grid that
was clicked (row, col), whose centre is the point. In every block the query is the token covering
that point (``token_at``); its attention row at the block's resolution is drawn in the big map
(``QueryMaps.layer_maps``) and, resampled (nearest) to the thumbnail grid (``thumbnail_grid``),
in the head grid. Without a point the rows are the mean row over every token (the average pool).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from torch import nn

from vitviz.kindapi.protocol import (
    ModelShape,
    QueryMaps,
    Session,
)
from vitviz.kinds.swin.analysis import SwinAnalysis

if TYPE_CHECKING:
    from vitviz.checkpoints.loaded import LoadedModel

THUMB_MAX_CELLS = 32  # a thumbnail tile is a few dozen screen pixels wide: finer grids are lost


def has_head(model: nn.Module) -> bool:
    return model.config.num_classes > 0


def _size(size: Sequence[int]) -> str:
    return "×".join(str(int(v)) for v in size)


def _known(value: object) -> str:
    return str(value) if value else "?"  # a model-code Swin may not say its width (0)


def architecture(config: Mapping[str, Any], loaded: LoadedModel) -> tuple[str, ...]:
    """The stages (blocks, width, heads and window of each), patch, embedding width, version and
    sizes, from the config's dict (a model-code Swin's: no depths, only the most heads)."""
    cfg = loaded.model.config
    trained = _size(cfg.image_size)
    if "depths" not in config:
        return (
            f"layers × heads: {cfg.depth} × {max(cfg.heads)}, dim {config.get('dim', '?')}, "
            f"patch {cfg.patch_size}, trained at {trained}",
            f"classes: {cfg.num_classes}; prefix tokens: 0",
        )
    depths, dims = config["depths"], config.get("dims") or [0] * len(config["depths"])
    heads, windows = config["heads"], config.get("window_sizes") or [0] * len(depths)
    version = " V2" if config.get("version", 1) == 2 else " (v1)"
    version = " V2-CR" if config.get("cr") else version
    lines = [
        f"architecture: Swin{version}, {len(depths)} stages, {sum(depths)} blocks "
        f"(depths {'-'.join(map(str, depths))})",
        f"patch {cfg.patch_size}, embed dim {_known(dims[0])}, trained at {trained}; "
        f"images prepared at {_size(loaded.preprocessing.image_size)} (below)",
    ]
    for s, (d, w, h, win) in enumerate(zip(depths, dims, heads, windows, strict=True)):
        lines.append(f"stage {s}: {d} blocks, width {_known(w)}, {h} heads, window {_known(win)}")
    lines.append(
        f"classes: {cfg.num_classes}; no prefix tokens (the head reads the average of the "
        "last stage's tokens)"
    )
    lines.append("parts: " + "; ".join(loaded.kind.parts(loaded.model)))
    return tuple(lines)


def model_shape(loaded: LoadedModel) -> ModelShape:
    """Blocks as layers (a model-code Swin has no depths), the most heads of a stage."""
    cfg = loaded.model.config
    config = cfg.to_dict() if hasattr(cfg, "to_dict") else {}
    heads = config.get("heads")
    if isinstance(heads, (list, tuple)):
        headline = f"{cfg.depth} blocks, {min(heads)}–{max(heads)} heads"
    else:
        headline = f"{cfg.depth} layers × {max(cfg.heads)} heads"
    return ModelShape(
        depth=cfg.depth,
        heads=max(cfg.heads),
        num_prefix_tokens=0,
        config=config,
        headline=headline,
        architecture=architecture(config, loaded),
    )


def unavailable(loaded: LoadedModel) -> dict[str, str]:
    """{method name: why it can't run on a Swin} over the whole method table."""
    from vitviz.kinds.table_kind import unavailable_methods

    return unavailable_methods(loaded, has_head(loaded.model) and bool(loaded.class_names))


def thumbnail_grid(
    stage_grids: Sequence[tuple[int, int]], patch: int
) -> tuple[tuple[int, int], int]:
    """The grid the head grid's thumbnails are drawn at and its cell size in input pixels: the
    first stage's grid whose sides are at most THUMB_MAX_CELLS (Swin-T at 224: stage 2's 28 × 28,
    not the 56 × 56 first stage, a quarter of the pixels to colour on every query). Only a stage
    that covers the input exactly qualifies (a padded one, 35 → 18 cells, would stretch); the
    first stage's grid when none does."""
    h0, w0 = (int(v) for v in stage_grids[0])
    for s, grid in enumerate(stage_grids):
        exact = grid[0] * 2**s == h0 and grid[1] * 2**s == w0
        if exact and max(grid) <= THUMB_MAX_CELLS:
            return (int(grid[0]), int(grid[1])), patch * 2**s
    return (h0, w0), patch


def query_point(query: tuple[int, int] | None, patch: int) -> tuple[float, float] | None:
    """The clicked cell of the first stage's grid -> its centre in input pixels (y, x)."""
    if query is None:
        return None
    return ((query[0] + 0.5) * patch, (query[1] + 0.5) * patch)


def query_tokens(
    analysis: SwinAnalysis, point: tuple[float, float] | None, patch: int
) -> list[int]:
    """Per block the token covering ``point`` (−1 for every block when there is no point)."""
    from vitviz.kinds.swin.attention import token_at
    from vitviz.kinds.swin.stats import token_pixels

    if point is None:
        return [-1] * len(analysis.layouts)
    return [
        token_at(layout, token_pixels(patch, stage), point)
        for layout, stage in zip(analysis.layouts, analysis.block_stages, strict=True)
    ]


def block_rows(analysis: SwinAnalysis, block: int, token: int) -> np.ndarray:
    """(heads, H_b, W_b) float32: the query token's attention row per head (token −1: the
    mean row over every token, what the average pool reads)."""
    import torch

    from vitviz.kinds.swin.attention import from_slots, query_row, windowed_attention

    attn, layout = analysis.attentions[block], analysis.layouts[block]
    H, W = layout.grid
    with torch.no_grad():
        if token < 0:
            sums = windowed_attention(attn, layout).sum(dim=2)  # (windows, heads, n)
            rows = from_slots(sums.permute(1, 0, 2), layout) / (H * W)  # (heads, N)
        else:
            rows = query_row(attn, layout, token)  # (heads, N)
    return rows.float().cpu().numpy().reshape(-1, H, W)


def resample_index(
    cells: tuple[int, int], cell_px: int, token_px: int, grid: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray]:
    """Nearest resampling of a block's grid onto a grid of ``cells`` cells of ``cell_px`` input
    pixels: for each cell the row (h, 1) and column (1, w) of the block token covering its
    centre."""
    from vitviz.kinds.swin.attention import covering_tokens

    ys = covering_tokens(cells[0], cell_px, token_px, grid[0]).numpy()
    xs = covering_tokens(cells[1], cell_px, token_px, grid[1]).numpy()
    return ys[:, None], xs[None, :]


def with_gradients(session: Session, target: int) -> SwinAnalysis:
    """The analysis with ∂y_target/∂A_b (the pass again, on the same input, when it lacks them);
    it replaces the session's."""
    from vitviz.kinds.swin.analysis import analyze_swin

    a = session.analysis
    if a.gradients is None or a.target_class != target:
        kept = a.pixels, a.source, a.geometry
        a = analyze_swin(session.loaded, a.input, gradients=True, target_class=target)
        a.pixels, a.source, a.geometry = kept
        session.analysis = a
    return a


def query_maps(session: Session, query: tuple[int, int] | None) -> QueryMaps:
    """Every block's and head's attention of the query, the mean over heads (at the thumbnail
    grid) and every block's rows at its own resolution."""
    from vitviz.imaging.colormaps import nice_levels
    from vitviz.kinds.swin.stats import token_pixels

    a = session.analysis
    patch = session.loaded.model.config.patch_size
    thumb, thumb_px = thumbnail_grid(a.stage_grids, patch)
    tokens = query_tokens(a, query_point(query, patch), patch)
    L = len(a.attentions)
    most = max(int(t.shape[1]) for t in a.attentions)
    head_maps = np.full((L, most, *thumb), np.nan, dtype=np.float32)
    mean_maps = np.empty((L, *thumb), dtype=np.float32)
    block_maps = []
    lo, hi = np.inf, -np.inf
    for b in range(L):
        rows = block_rows(a, b, tokens[b])  # (heads, H_b, W_b)
        block_maps.append(rows)
        layout = a.layouts[b]
        token_px = token_pixels(patch, a.block_stages[b])
        ys, xs = resample_index(thumb, thumb_px, token_px, layout.grid)
        flat = (ys * layout.grid[1] + xs).reshape(-1)  # (h·w,) token under each thumbnail cell
        h = rows.shape[0]
        small = head_maps[b, :h].reshape(h, -1)  # a view: filled in place
        np.take(rows.reshape(h, -1), flat, axis=1, out=small)
        mean_maps[b] = small.mean(axis=0).reshape(thumb)
        lo, hi = min(lo, float(rows.min())), max(hi, float(rows.max()))
    return QueryMaps(
        head_maps=head_maps,
        mean_maps=mean_maps,
        layer_maps=tuple(block_maps),
        prefix_attention=np.zeros((L, most, 0), dtype=np.float32),
        query_tokens=tuple(tokens),
        levels=nice_levels(np.array([lo, hi])),  # the thumbnails show these rows' values
    )


def method_map(
    session: Session,
    method: str,
    query: tuple[int, int] | None,
    target_class: int | None,
    params: Mapping[str, Any],
) -> np.ndarray:
    """``swin_method_map`` from the last stage's token covering the clicked cell's centre (None:
    the average pool); the gradient rollout of ``target_class`` runs the pass again for it. A
    method the Swin runs as the table's own version (``random``) runs through the table."""
    from vitviz.kinds.swin.methods import METHODS, swin_method_map

    a = session.analysis
    target = default_class(session) if target_class is None else target_class
    if method not in METHODS:
        from vitviz.explain.methods import get_method

        return get_method(method)(a, query, target, params, strict=False).numpy()
    model = session.loaded.model
    patch = model.config.patch_size
    point = query_point(query, patch)
    token = None if point is None else (query_tokens(a, point, patch)[-1], len(a.stage_grids) - 1)
    if method == "gradient-rollout":
        a = with_gradients(session, target)
    return swin_method_map(a, model, method, token, target, dict(params)).float().numpy()


def default_class(session: Session) -> int:
    """The current pass's class (the top one, or the one a gradient pass was run for)."""
    return session.analysis.target_class if has_head(session.loaded.model) else -1


def export_npz(
    session: Session,
    path: Path,
    method: str,
    params: Mapping[str, Any],
    target_class: int | None,
) -> Path:
    """The arrays of ``vitviz-cli explain`` with ``--method`` the shown method (rollout always;
    attention adds no map: every block's window attention is in the npz already), its parameters
    and ``--class`` the chosen class."""
    from vitviz.kinds.swin.output import export_settings, swin_output_maps, write_swin_npz

    loaded, a = session.loaded, session.analysis
    head = has_head(loaded.model)
    settings = export_settings(loaded.kind, loaded.model, head, method, dict(params), target_class)
    target = a.target_class if target_class is None else target_class
    if head and (target != a.target_class or "gradient-rollout" in settings.methods):
        a = with_gradients(session, target)  # the class's pass, as the CLI's --class runs it
    maps = swin_output_maps(a, loaded.model, settings)
    return write_swin_npz(a, loaded.class_names, maps, path)
