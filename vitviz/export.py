"""Writing an Analysis out: the .npz of numbers and the overlay PNGs (same for CLI and window)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from vitviz.analysis import Analysis
from vitviz.checkpoints.atomic import atomic_path
from vitviz.imaging.overlay import head_grid_image, overlay_on_image, save_png

NPZ_KEYS = (
    "input",
    "logits",
    "probs",
    "class_names",
    "attention",
    "grid",
    "num_prefix_tokens",
    "rollout",
    "gradient_rollout",
    "relevance",
    "target_class",
    "mean_distance",
    "entropy",
)


@dataclass(frozen=True)
class MapSettings:
    """The settings the exported maps were computed with (DESIGN §5 defaults)."""

    fusion: str = "mean"
    discard_ratio: float = 0.0
    start_layer: int = 0
    target_class: int | None = None  # None: the top prediction


@dataclass
class ExplainedMaps:
    rollout: np.ndarray  # (gh, gw) float32
    gradient_rollout: np.ndarray  # (gh, gw) float32; NaN for a model without a head
    relevance: np.ndarray  # (gh, gw) float32; NaN for a model without a head
    target_class: int  # -1 for a model without a head


def compute_maps(analysis: Analysis, settings: MapSettings = MapSettings()) -> ExplainedMaps:
    """Rollout, gradient rollout and relevance of the CLS query with ``settings``."""
    roll = analysis.rollout(
        fusion=settings.fusion,
        discard_ratio=settings.discard_ratio,
        start_layer=settings.start_layer,
    ).numpy()
    if not analysis.has_head:
        nan = np.full(analysis.grid, np.nan, dtype=np.float32)
        return ExplainedMaps(roll.astype(np.float32), nan, nan.copy(), -1)
    c = analysis.top_class if settings.target_class is None else settings.target_class
    grad_roll = analysis.gradient_rollout(
        c, discard_ratio=settings.discard_ratio, start_layer=settings.start_layer
    ).numpy()
    rel = analysis.relevance(c, start_layer=settings.start_layer).numpy()
    return ExplainedMaps(
        roll.astype(np.float32), grad_roll.astype(np.float32), rel.astype(np.float32), int(c)
    )


def write_npz(analysis: Analysis, maps: ExplainedMaps, path: str | os.PathLike[str]) -> Path:
    """All the numbers of one analysis, exactly the keys of ``NPZ_KEYS``, written atomically."""
    arrays = {
        "input": analysis.input.numpy().astype(np.float32),
        "logits": analysis.logits.numpy().astype(np.float32),
        "probs": analysis.probs.numpy().astype(np.float32),
        "class_names": np.array(analysis.class_names, dtype=str),
        "attention": analysis.attention.float().numpy(),
        "grid": np.array(analysis.grid, dtype=np.int64),
        "num_prefix_tokens": np.array(analysis.num_prefix_tokens, dtype=np.int64),
        "rollout": maps.rollout,
        "gradient_rollout": maps.gradient_rollout,
        "relevance": maps.relevance,
        "target_class": np.array(maps.target_class, dtype=np.int64),
        "mean_distance": analysis.mean_distance.numpy().astype(np.float32),
        "entropy": analysis.entropy.numpy().astype(np.float32),
    }
    assert tuple(arrays) == NPZ_KEYS
    target = Path(path)
    with atomic_path(target) as tmp, open(tmp, "wb") as f:
        np.savez(f, **arrays)
    return target


def map_overlay(
    analysis: Analysis, map_: np.ndarray, colormap: str = "viridis", opacity: float = 0.6
) -> Image.Image:
    """A (gh, gw) map over the source image at its own resolution (or the model input)."""
    if analysis.source is not None:
        return overlay_on_image(
            analysis.source, map_, geometry=analysis.geometry, colormap=colormap, opacity=opacity
        )
    return overlay_on_image(analysis.pixels, map_, colormap=colormap, opacity=opacity)


def heads_grid(
    analysis: Analysis,
    colormap: str = "viridis",
    opacity: float = 0.6,
    patch: tuple[int, int] | None = None,
) -> Image.Image:
    """The layer × head grid of the query's (default CLS) maps with one shared colour scale."""
    maps = analysis.all_attention_maps(patch).numpy()
    return head_grid_image(maps, analysis.pixels, colormap=colormap, opacity=opacity)


def write_pngs(
    analysis: Analysis,
    maps: ExplainedMaps,
    folder: str | os.PathLike[str],
    stem: str,
    colormap: str = "viridis",
) -> list[Path]:
    """<stem>_rollout.png, <stem>_relevance.png (if the model has a head), <stem>_heads.png."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, m in (("rollout", maps.rollout), ("relevance", maps.relevance)):
        if np.isnan(m).all():
            continue
        path = out / f"{stem}_{name}.png"
        save_png(map_overlay(analysis, m, colormap), path)
        written.append(path)
    path = out / f"{stem}_heads.png"
    save_png(heads_grid(analysis, colormap), path)
    written.append(path)
    return written
