"""How small a large image may be decoded: what the overlays, the window and the model need.

A 10000 × 8000 photograph is 80 million pixels; nothing vitviz shows or writes needs them all:

- overlays (PNG export) are at most ``OVERLAY_MAX_SIDE`` pixels on their long side unless the
  caller asks for the full size, and the window shows at most 2048 (``DISPLAY_MAX_SIDE`` of
  ``vitviz.workers.job_basics``), so one decode at ``OVERLAY_MAX_SIDE`` serves both;
- the model input is tiny, but it must come out as it would from the full image.

The rule for the model (``model_min_size``): an image is reduced only while it stays at least
``REDUCING_GAP`` times as large, along each axis, as the picture the model input is resized
from: the resize-to-cover box ``image_size / crop_pct`` for ``"crop"`` (whatever the aspect
ratio, covering it ``REDUCING_GAP`` times over means ``REDUCING_GAP`` source pixels per input
pixel), the input itself for ``"squash"`` and ``"fit"``. The model's own resize then still
averages at least ``REDUCING_GAP`` × ``REDUCING_GAP`` pixels into each input pixel, so the
input differs from the one made from the full image by about a grey level (the antialiased
reduction before it is nearly lossless at that scale). The crop box and the "fit" size are
planned on the full picture's size (``prepare_image(..., full_size=...)``), so the rounding of
the reduced size never moves the crop. Images within the limits are never touched.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from vitviz.imaging.preprocess import Preprocessing, input_size_for

__all__ = ["OVERLAY_MAX_SIDE", "REDUCING_GAP", "model_min_size"]

#: Long side of the overlays written by default (and of the source an analysis keeps).
OVERLAY_MAX_SIDE = 4096

#: How many times the resize source of the model input a reduced image must still cover.
REDUCING_GAP = 3


def model_min_size(
    prep: Preprocessing, patch_size: int
) -> Callable[[tuple[int, int]], tuple[int, int]]:
    """The smallest (H, W) an image of upright size (H, W) may be reduced to, for ``prep``."""

    def smallest(size: tuple[int, int]) -> tuple[int, int]:
        if prep.resize == "crop":
            th, tw = prep.image_size
            base = (math.floor(th / prep.crop_pct), math.floor(tw / prep.crop_pct))
        else:
            base = input_size_for(prep, size, patch_size)
        return REDUCING_GAP * base[0], REDUCING_GAP * base[1]

    return smallest
