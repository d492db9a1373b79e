"""The engine's jobs for a Swin Transformer (no Qt): open one, analyse an image with
``analyze_swin``, and the maps of a query point, for the window's head grid and big map.

A query is a point of the model input; the window sends the cell of the first stage's grid that
was clicked (row, col), whose centre is the point. In every block the query is the token covering
that point (``token_at``); its attention row at the block's resolution is drawn in the big map
and, resampled (nearest) to the thumbnail grid (``thumbnail_grid``), in the head grid.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from vitviz.workers.job_basics import UserFacingError, display_copy
from vitviz.workers.messages import (
    MapParams,
    ModelSummary,
    SwinBlockInfo,
    SwinImageResult,
    SwinMapsResult,
)


def is_swin(model: Any) -> bool:
    """``model`` (or a LoadedModel holding one) is a Swin Transformer."""
    return getattr(getattr(model, "model", model), "model_kind", None) == "swin"


def summarize_swin(loaded: Any, device: str) -> ModelSummary:
    """What the window shows about a Swin: blocks as layers, the most heads of a stage."""
    cfg = loaded.model.config
    return ModelSummary(
        name=loaded.name,
        family=loaded.family,
        path=loaded.path,
        num_classes=cfg.num_classes,
        depth=cfg.depth,  # blocks of all stages (a model-code Swin has no depths)
        heads=max(cfg.heads),
        patch_size=cfg.patch_size,
        image_size=tuple(cfg.image_size),
        num_prefix_tokens=0,
        device=device,
        preprocessing=loaded.preprocessing.to_dict(),
        notes=tuple(loaded.notes),
        provenance=dict(loaded.provenance),
        config=cfg.to_dict() if hasattr(cfg, "to_dict") else {},
    )


def unavailable(loaded: Any) -> dict[str, str]:
    """{method name: why it can't run on a Swin} over the whole method table."""
    from vitviz.explain.methods import all_methods
    from vitviz.kinds.swin.methods import swin_unavailable

    has_head = loaded.model.config.num_classes > 0 and bool(loaded.class_names)
    model = loaded.model
    reasons = {m.name: swin_unavailable(m.name, m.label, has_head, model) for m in all_methods()}
    return {name: why for name, why in reasons.items() if why is not None}


def block_infos(analysis: Any, patch_size: int) -> tuple[SwinBlockInfo, ...]:
    """Per block: stage, index in its stage, window, shift, heads, token size, grid."""
    from vitviz.kinds.swin.stats import token_pixels

    out, counts = [], {}
    for attn, layout, stage in zip(
        analysis.attentions, analysis.layouts, analysis.block_stages, strict=True
    ):
        index = counts.get(stage, 0)
        counts[stage] = index + 1
        out.append(
            SwinBlockInfo(
                stage=stage,
                index=index,
                shifted=layout.shifted,
                window=tuple(layout.window),
                shift=tuple(layout.shift),
                heads=int(attn.shape[1]),
                token_pixels=token_pixels(patch_size, stage),
                grid=tuple(layout.grid),
            )
        )
    return tuple(out)


THUMB_MAX_CELLS = 32  # a thumbnail tile is a few dozen screen pixels wide: finer grids are lost


def thumbnail_grid(
    stage_grids: tuple[tuple[int, int], ...] | list, patch: int
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


def _padded(rows: list[np.ndarray], heads: int) -> np.ndarray:
    """Per block (h_b,) values -> (L, heads) float32, NaN where a block has fewer heads."""
    out = np.full((len(rows), heads), np.nan, dtype=np.float32)
    for b, r in enumerate(rows):
        out[b, : r.shape[0]] = r
    return out


def analyze_swin_image(
    state: Any, source: Any, label: str, gradients: bool = False
) -> SwinImageResult:
    """``jobs.analyze_image`` for a Swin: one ``analyze_swin`` pass, the numbers the window
    draws (the block layout, head statistics per block and head, predictions)."""
    from vitviz.imaging import ImageLoadError
    from vitviz.kinds.swin.analysis import analyze_swin
    from vitviz.kinds.swin.attention import window_ids
    from vitviz.kinds.swin.methods import ignored_parameters
    from vitviz.kinds.swin.stats import swin_head_statistics

    loaded = state.loaded
    start = time.perf_counter()
    has_head = loaded.model.config.num_classes > 0
    try:
        analysis = analyze_swin(loaded, source, gradients=gradients and has_head)
    except ImageLoadError as exc:
        raise UserFacingError(str(exc), "image") from exc
    except ValueError as exc:
        raise UserFacingError(f"{label}: {exc}", "image") from exc
    state.analysis, state.source, state.label = analysis, source, label
    patch = loaded.model.config.patch_size
    blocks = block_infos(analysis, patch)
    dist, ent = swin_head_statistics(
        analysis.attentions, analysis.layouts, analysis.block_stages, patch
    )
    most = max(b.heads for b in blocks)
    pixels = np.ascontiguousarray(analysis.pixels, dtype=np.uint8)
    h, w = pixels.shape[:2]
    grid0 = tuple(analysis.stage_grids[0])
    display, scale = display_copy(analysis.source)  # the photo, as for a ViT
    left, top, right, bottom = analysis.geometry.region
    thumb_grid, thumb_pixels = thumbnail_grid(analysis.stage_grids, patch)
    L = len(blocks)
    return SwinImageResult(
        label=label,
        source_path=Path(source) if isinstance(source, (str, Path)) else None,
        display=display,
        display_scale=scale,
        region=(left * scale, top * scale, right * scale, bottom * scale),
        input_pixels=pixels,
        grid=grid0,
        patch_size=patch,
        num_prefix_tokens=0,
        num_layers=L,
        num_heads=most,
        class_names=list(loaded.class_names) if has_head else [],
        probs=analysis.probs.float().cpu().numpy(),
        logits=analysis.logits.float().cpu().numpy(),
        top_class=analysis.target_class if has_head else -1,
        mean_distance=_padded([d.float().cpu().numpy() for d in dist], most),
        entropy=_padded([e.float().cpu().numpy() for e in ent], most),
        prefix_share=np.full((L, most), np.nan, dtype=np.float32),
        token_norms=np.zeros((L, 0), dtype=np.float32),
        device=str(next(loaded.model.parameters()).device),
        seconds=time.perf_counter() - start,
        attention=None,  # every query goes to the engine (its rows cost O(n) there)
        unavailable=unavailable(loaded),
        blocks=blocks,
        stage_grids=tuple(tuple(g) for g in analysis.stage_grids),
        input_size=(h, w),
        ignored_params=ignored_parameters(),
        window_ids=tuple(window_ids(lay).numpy().astype(np.int32) for lay in analysis.layouts),
        thumb_grid=thumb_grid,
        thumb_pixels=thumb_pixels,
    )


def query_point(query: tuple[int, int] | None, patch: int) -> tuple[float, float] | None:
    """The clicked cell of the first stage's grid -> its centre in input pixels (y, x)."""
    if query is None:
        return None
    return ((query[0] + 0.5) * patch, (query[1] + 0.5) * patch)


def query_tokens(analysis: Any, point: tuple[float, float] | None, patch: int) -> list[int]:
    """Per block the token covering ``point`` (−1 for every block when there is no point)."""
    from vitviz.kinds.swin.attention import token_at
    from vitviz.kinds.swin.stats import token_pixels

    if point is None:
        return [-1] * len(analysis.layouts)
    return [
        token_at(layout, token_pixels(patch, stage), point)
        for layout, stage in zip(analysis.layouts, analysis.block_stages, strict=True)
    ]


def block_rows(analysis: Any, block: int, token: int) -> np.ndarray:
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


def resample_index(cells: tuple[int, int], cell_px: int, token_px: int, grid: tuple[int, int]):
    """Nearest resampling of a block's grid onto a grid of ``cells`` cells of ``cell_px`` input
    pixels: for each cell the row and column of the block token covering its centre."""
    from vitviz.kinds.swin.attention import covering_tokens

    ys = covering_tokens(cells[0], cell_px, token_px, grid[0]).numpy()
    xs = covering_tokens(cells[1], cell_px, token_px, grid[1]).numpy()
    return ys[:, None], xs[None, :]


def _with_gradients(state: Any, target: int) -> Any:
    """The analysis with ∂y_target/∂A_b (the pass again, on the same input, when it lacks them)."""
    from vitviz.kinds.swin.analysis import analyze_swin

    a = state.analysis
    if a.gradients is None or a.target_class != target:
        kept = a.pixels, a.source, a.geometry
        a = analyze_swin(state.loaded.model, a.input, gradients=True, target_class=target)
        a.pixels, a.source, a.geometry = kept
        state.analysis = a
    return a


def swin_maps(state: Any, params: MapParams) -> SwinMapsResult:
    """``jobs.compute_maps`` for a Swin: every block's and head's attention of the query, the
    mean over heads, and the chosen method's map."""
    from vitviz.imaging.colormaps import nice_levels
    from vitviz.kinds.swin.methods import swin_method_map
    from vitviz.kinds.swin.stats import token_pixels

    a = state.analysis
    patch = state.loaded.model.config.patch_size
    thumb, thumb_px = thumbnail_grid(a.stage_grids, patch)
    point = query_point(params.query, patch)
    tokens = query_tokens(a, point, patch)
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
    has_head = state.loaded.model.config.num_classes > 0
    top = a.target_class if has_head else -1
    target = top if params.target_class is None else params.target_class
    method_map, error = None, None
    if params.method != "attention":
        last = len(a.stage_grids) - 1
        query = None if point is None else (tokens[-1], last)
        try:
            if params.method in ("gradient-rollout",):
                a = _with_gradients(state, target)
            method_map = (
                swin_method_map(
                    a, state.loaded.model, params.method, query, target, params.params()
                )
                .float()
                .numpy()
            )
        except ValueError as exc:
            error = str(exc)
    return SwinMapsResult(
        params=params,
        head_maps=head_maps,
        mean_maps=mean_maps,
        method_map=method_map,
        target_class=target,
        prefix_attention=np.zeros((L, most, 0), dtype=np.float32),
        levels=nice_levels(np.array([lo, hi])),  # the thumbnails show these rows' values
        error=error,
        block_maps=tuple(block_maps),
        query_tokens=tuple(tokens),
    )


def export_swin(
    state: Any,
    path: Path,
    what: str,
    params: MapParams,
    current_map: np.ndarray | None,
    colormap: str,
    opacity: float,
    per_head: bool = False,
) -> Path:
    """``jobs.export`` for a Swin, through the writer of ``vitviz-cli explain``: 'npz' the same
    arrays as the CLI with ``--method`` the shown method (rollout always; attention adds no
    map: every block's window attention is in the npz already), its parameters and ``--class``
    the chosen class; 'view' the map on screen over the model input; 'heads' the
    query's thumbnails (every block and head, as the head grid shows them) as one picture."""
    from vitviz.kinds.swin.output import (
        export_settings,
        swin_map_picture,
        swin_output_maps,
        write_swin_npz,
    )

    a = state.analysis
    if what == "heads":
        from vitviz.export import heads_figure
        from vitviz.imaging.overlay import save_png

        shown = swin_maps(state, MapParams(query=params.query))  # the window's thumbnails
        labels = [b.label for b in block_infos(a, state.loaded.model.config.patch_size)]
        query = "query: average pool" if params.query is None else f"query cell {params.query}"
        picture = heads_figure(
            shown.head_maps,
            shown.mean_maps,
            a.pixels,
            row_names=labels,
            title="Window attention of every block and head",
            query=query,
            colormap=colormap,
            opacity=opacity,
            per_head=per_head,
        )
        return save_png(picture, path)
    if what == "view":
        if current_map is None:
            raise UserFacingError("There is no map on screen to export.", "export")
        from vitviz.imaging.overlay import save_png

        return save_png(swin_map_picture(a, current_map, colormap, opacity), path)
    loaded = state.loaded
    has_head = loaded.model.config.num_classes > 0
    settings = export_settings(
        loaded.model, has_head, params.method, params.params(), params.target_class
    )
    target = a.target_class if params.target_class is None else params.target_class
    if has_head and (target != a.target_class or "gradient-rollout" in settings.methods):
        a = _with_gradients(state, target)  # the class's pass, as the CLI's --class runs it
    maps = swin_output_maps(a, loaded.model, settings)
    return write_swin_npz(a, loaded.class_names, maps, path)
