"""ImageItem: pyqtgraph's, with its picture converted once per change into a format the raster
painter draws as is.

pyqtgraph makes RGB888, RGBA8888 or Indexed8 QImages; QPainter converts those to a 32-bit
format on every paint. Converting once when the image is rendered (after ``setImage`` or a new
colour map or levels) keeps paints to a blit (DESIGN §7: images once per change, not per paint).
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtGui import QImage

FAST_FORMATS = (QImage.Format.Format_RGB32, QImage.Format.Format_ARGB32_Premultiplied)


class ImageItem(pg.ImageItem):
    def render(self) -> None:
        super().render()
        image = self.qimage
        if image is None or image.format() in FAST_FORMATS:
            return
        fmt = FAST_FORMATS[1] if image.hasAlphaChannel() else FAST_FORMATS[0]
        self.qimage = image.convertToFormat(fmt)
