"""Image loading (the formats vitviz reads), preprocessing into model inputs, patch geometry,
overlays.

Importing this package does not import torch; ``prepare_image`` and ``denormalize`` do when
called.
"""

from __future__ import annotations

from vitviz.imaging.colormaps import COLORMAPS, apply_colormap, lookup_table
from vitviz.imaging.geometry import PatchGeometry
from vitviz.imaging.loading import (
    DEFAULT_MAX_PIXELS,
    IMAGE_EXTENSIONS,
    ImageLoadError,
    is_image_path,
    list_images,
    load_image,
)
from vitviz.imaging.overlay import head_grid_image, overlay_on_image, save_png, upsample_map
from vitviz.imaging.preprocess import PreparedImage, Preprocessing, denormalize, prepare_image

__all__ = [
    "COLORMAPS",
    "DEFAULT_MAX_PIXELS",
    "IMAGE_EXTENSIONS",
    "ImageLoadError",
    "PatchGeometry",
    "PreparedImage",
    "Preprocessing",
    "apply_colormap",
    "denormalize",
    "head_grid_image",
    "is_image_path",
    "list_images",
    "load_image",
    "lookup_table",
    "overlay_on_image",
    "prepare_image",
    "save_png",
    "upsample_map",
]
