"""Localisation of a map against an object mask: mass inside the mask and the pointing game.

The mask is an image the size of the source image (``<stem>_mask.png``): a pixel is in the
object when the mean of its R, G, B is above 127. It is taken to the patch grid through the
same geometry as the image: each model-input pixel takes the mask value of the source pixel
under its centre, and a patch is in the mask when more than half of its pixels are.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from torch import Tensor

from vitviz.imaging.geometry import PatchGeometry
from vitviz.imaging.loading import MASK_SUFFIX


@dataclass(frozen=True)
class Localisation:
    mass_in_mask: float  # share of the map's non-negative mass on mask patches; NaN: no mass
    pointing_hit: bool  # the map's maximum (lowest index on ties) lies on a mask patch

    def to_dict(self) -> dict[str, Any]:
        mass = None if math.isnan(self.mass_in_mask) else self.mass_in_mask
        return {"mass_in_mask": mass, "pointing_game": self.pointing_hit}


def _array(values: Tensor | np.ndarray) -> np.ndarray:
    if isinstance(values, Tensor):
        return values.detach().cpu().double().numpy()
    return np.asarray(values, dtype=np.float64)


def localise(map_: Tensor | np.ndarray, mask: Tensor | np.ndarray) -> Localisation:
    """Mass of max(map, 0) on the mask patches over its total, and whether the map's maximum
    (first in row-major order on ties) is on the mask: (gh, gw) map, (gh, gw) bool mask."""
    m = _array(map_)
    inside = _array(mask) > 0.5
    if m.shape != inside.shape:
        raise ValueError(f"the map is {m.shape} but the mask grid is {inside.shape}")
    if not np.isfinite(m).all():
        raise ValueError("the map holds NaN or infinite values")
    positive = np.clip(m, 0, None)
    total = positive.sum()
    mass = float(positive[inside].sum() / total) if total > 0 else math.nan
    peak = int(np.argmax(m.reshape(-1)))  # first maximum
    return Localisation(mass, bool(inside.reshape(-1)[peak]))


def mask_to_grid(mask: np.ndarray, geometry: PatchGeometry) -> np.ndarray:
    """(mask H, W) bool -> (gh, gw) bool: patches more than half covered (module doc).

    The mask covers the whole source image; it may be stored at another resolution than the
    image the geometry refers to (e.g. a reduced decode), as long as the aspect ratio is the
    same (within 2 %).
    """
    mask = np.asarray(mask, dtype=bool)
    if mask.ndim != 2 or min(mask.shape) < 1:
        raise ValueError(f"a mask must be a 2-D image, got shape {mask.shape}")
    sh, sw = geometry.source_size
    mh, mw = mask.shape
    if abs((mw / mh) / (sw / sh) - 1) > 0.02:
        raise ValueError(
            f"the mask is {mw}×{mh} pixels but the image is {sw}×{sh}; "
            "a mask must have the image's size (or its aspect ratio)"
        )
    (gh, gw), p = geometry.grid, geometry.patch_size
    sx, sy = geometry.scale
    left, top = geometry.region[:2]
    xs = (left + (np.arange(gw * p) + 0.5) * sx) * (mw / sw)  # input pixel centres, mask px
    ys = (top + (np.arange(gh * p) + 0.5) * sy) * (mh / sh)
    cols = np.floor(xs).astype(np.int64).clip(0, mw - 1)
    rows = np.floor(ys).astype(np.int64).clip(0, mh - 1)
    sampled = mask[rows[:, None], cols[None, :]]  # (gh·p, gw·p) in input pixels
    share = sampled.reshape(gh, p, gw, p).mean(axis=(1, 3))
    return share > 0.5


def load_mask(path: str | os.PathLike[str]) -> np.ndarray:
    """A mask image -> (H, W) bool, in where the mean of R, G, B is above 127 (safe loading)."""
    from vitviz.imaging import load_image

    rgb = np.asarray(load_image(path), dtype=np.float64)
    return rgb.mean(axis=-1) > 127


def mask_path_for(
    image_path: str | os.PathLike[str], masks_dir: str | os.PathLike[str] | None = None
) -> Path | None:
    """``<stem>_mask.png`` in ``masks_dir`` (or beside the image) when it exists, else None."""
    image_path = Path(image_path)
    folder = Path(masks_dir) if masks_dir is not None else image_path.parent
    candidate = folder / (image_path.stem + MASK_SUFFIX)
    return candidate if candidate.is_file() else None


def mask_grid_for(
    image_path: str | os.PathLike[str],
    geometry: PatchGeometry,
    masks_dir: str | os.PathLike[str] | None = None,
) -> np.ndarray | None:
    """The (gh, gw) patch mask of an image from its ``<stem>_mask.png``, or None without one."""
    path = mask_path_for(image_path, masks_dir)
    return None if path is None else mask_to_grid(load_mask(path), geometry)
