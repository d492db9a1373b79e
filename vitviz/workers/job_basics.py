"""What the engine's job modules share: the error type for expected mistakes, and the photo's
display copy (``jobs`` re-exports them: the engine and the tests know them as ``jobs.*``)."""

from __future__ import annotations

from typing import Any

import numpy as np

DISPLAY_MAX_SIDE = 2048  # larger source images are shown downscaled (maps are unaffected)


class UserFacingError(Exception):
    """An expected mistake with a short message for the window (nothing changes)."""

    def __init__(self, message: str, kind: str = "error", **details: Any) -> None:
        super().__init__(message)
        self.kind = kind
        self.details = details


def display_copy(image: Any) -> tuple[np.ndarray, float]:
    """(h, w, 3) uint8 of the source for display, at most DISPLAY_MAX_SIDE on its long side."""
    from PIL import Image

    w, h = image.size
    scale = min(1.0, DISPLAY_MAX_SIDE / max(w, h))
    if scale < 1.0:
        image = image.resize(
            (max(1, round(w * scale)), max(1, round(h * scale))), Image.Resampling.BILINEAR
        )
        scale = image.size[0] / w
    return np.asarray(image, dtype=np.uint8).copy(), scale
