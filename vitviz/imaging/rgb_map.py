"""An RGB map (a method of the table whose map is colours, the PCA of features: DESIGN §5)
over an image: each grid cell's colour over the pixels whose centre it covers."""

from __future__ import annotations

import numpy as np
from PIL import Image

from vitviz.imaging.overlay import upsample_map


def rgb_map_array(rgb: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """(h, w, 3) colours in [0, 1] -> (H, W, 3) float32, nearest (cells line up with patches)."""
    m = np.asarray(rgb, dtype=np.float32)
    if m.ndim != 3 or m.shape[-1] != 3:
        raise ValueError(f"expected an (h, w, 3) map of colours, got shape {m.shape}")
    return np.stack([upsample_map(m[..., c], size) for c in range(3)], axis=-1)


def rgb_over_image(pixels: np.ndarray, rgb: np.ndarray, opacity: float = 1.0) -> Image.Image:
    """``rgb`` (h, w, 3) in [0, 1] over ``pixels`` (H, W, 3) uint8 at ``opacity``; NaN cells
    show the image."""
    base = np.asarray(pixels, dtype=np.float32) / 255.0
    colours = rgb_map_array(rgb, base.shape[:2])
    shown = np.where(np.isfinite(colours), colours, base)
    out = (1.0 - opacity) * base + opacity * shown
    return Image.fromarray(np.clip(out * 255.0 + 0.5, 0, 255).astype(np.uint8))
