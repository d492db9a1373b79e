"""Head effects and patching effects written out (``vitviz-cli ablate`` / ``patch``): one .npz
and one PNG of the layer × head grid per image (or pair), and over several the mean and the
standard deviation of the effects. Layers and heads are counted from 0; NaN is a head its
layer lacks. Files are written atomically."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image

from vitviz.checkpoints.atomic import atomic_path
from vitviz.imaging.effect_grid import effect_grid_picture
from vitviz.imaging.overlay import save_png
from vitviz.pipeline.head_effects import HeadEffects, PatchingEffects


def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> Path:
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, **arrays)
    return path


def ablation_arrays(effects: HeadEffects) -> dict[str, np.ndarray]:
    """``head_effect`` (L, H), ``head_effect_prob`` (L, H), ``target_class``, ``logits``
    (classes,) of the full pass, ``mode``."""
    return {
        "head_effect": effects.effect.numpy().astype(np.float32),
        "head_effect_prob": effects.effect_prob.numpy().astype(np.float32),
        "target_class": np.asarray(effects.target, dtype=np.int64),
        "logits": effects.logits.numpy().astype(np.float32),
        "mode": np.asarray(effects.mode),
    }


def patching_arrays(effects: PatchingEffects) -> dict[str, np.ndarray]:
    """``patching_effect`` (L, H), ``target_class``, ``clean_logits``, ``corrupted_logits``."""
    return {
        "patching_effect": effects.effect.numpy().astype(np.float32),
        "target_class": np.asarray(effects.target, dtype=np.int64),
        "clean_logits": effects.clean_logits.numpy().astype(np.float32),
        "corrupted_logits": effects.corrupted_logits.numpy().astype(np.float32),
    }


def spread(grids: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation (population, ddof 0) over ``grids`` (each (L, H))."""
    stack = np.stack([np.asarray(g, dtype=np.float64) for g in grids])
    return stack.mean(0).astype(np.float32), stack.std(0).astype(np.float32)


def summary_arrays(key: str, grids: Sequence[np.ndarray], names: Sequence[str]) -> dict:
    """``<key>_mean`` and ``<key>_std`` (L, H) over the images, and their ``images`` names."""
    mean, std = spread(grids)
    return {f"{key}_mean": mean, f"{key}_std": std, "images": np.asarray(list(names))}


def grid_png(
    path: Path, values: np.ndarray, lines: Sequence[str], row_labels: Sequence[str]
) -> Path:
    picture: Image.Image = effect_grid_picture(values, lines, row_labels)
    return save_png(picture, path)
