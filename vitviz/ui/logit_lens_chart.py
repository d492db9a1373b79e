"""The logit lens of the Features tab (DESIGN §5): the top classes' probability by depth,
one line per class, read from each block's tokens through the final norm and head."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg

from vitviz.ui.charts import LegendBelow
from vitviz.ui.plot_axes import plain_axes

TOP = 3  # classes drawn: the last block's (the model's) top three
COLOURS = ("#4c72b0", "#dd8452", "#55a868")
MAX_TICKS = 16  # block numbers on the axis at most (whole blocks only, never 0.5)
NO_LENS = "No logit lens: this model has no classes to read (no classifier, or no prompts yet)"


def lens_classes(lens: np.ndarray, top: int = TOP) -> list[int]:
    """The classes the chart draws: the last finite row's top ``top``, most probable first."""
    finite = [row for row in lens if np.isfinite(row).all()]
    if not finite:
        return []
    return [int(c) for c in np.argsort(-finite[-1], kind="stable")[:top]]


TOP_ROOM_PX = 8  # half a tick label's height, and a little more


class LogitLensChart(pg.PlotWidget):
    """Probability (0..1) of the top classes after each block; a gap where a block has no
    readout (an earlier stage of another width)."""

    def __init__(self, parent: object = None) -> None:
        super().__init__(parent)
        self.setBackground("w")
        self.setMenuEnabled(False)
        self.setMouseEnabled(x=False, y=False)
        self.hideButtons()
        self.setLabel("bottom", "block: the top classes' probability read after it (logit lens)")
        self.setLabel("left", "p")
        plain_axes(self)
        self.getAxis("left").setTicks([[(0.0, "0"), (0.5, "0.5"), (1.0, "1")]])  # it is short
        self.setYRange(0.0, 1.0, padding=0.02)
        # room above the plot for the top tick's "1" (the view's edge would cut it in half)
        self.getPlotItem().setContentsMargins(0, TOP_ROOM_PX, 0, 0)
        self.legend = LegendBelow(self, columns=3, labelTextSize="8pt")
        self.shown: list[int] = []
        self.empty = pg.TextItem(NO_LENS, color="#555555", anchor=(0.5, 0.5))
        self.empty.setPos(0.5, 0.5)
        self.empty.hide()
        self.addItem(self.empty)  # kept over clear(): re-added there

    def note(self) -> str:
        """The words the chart shows instead of curves ("" when it draws some)."""
        return self.empty.toPlainText() if self.empty.isVisible() else ""

    def set_lens(self, lens: np.ndarray | None, class_names: list[str], why: str = NO_LENS) -> None:
        """Draw ``lens`` (L, classes); None clears (a model without a head or readout): no
        block numbers left from the last model, and the chart says ``why`` it is empty."""
        self.clear()
        self.legend.clear()
        self.addItem(self.empty)
        self.shown = []
        if lens is None or lens.ndim != 2 or lens.shape[1] == 0:
            self.getAxis("bottom").setTicks([[]])
            self.setXRange(0.0, 1.0, padding=0)
            self.empty.setText(why)
            self.empty.setVisible(bool(why))
            return
        self.empty.hide()
        self.shown = lens_classes(lens)
        x = np.arange(lens.shape[0], dtype=np.float64)
        for colour, c in zip(COLOURS, self.shown, strict=False):
            name = class_names[c] if c < len(class_names) else f"class {c}"
            pen = pg.mkPen(colour, width=2)
            y = lens[:, c].astype(np.float64)
            self.plot(x, y, pen=pen, symbol="o", symbolSize=5, symbolBrush=colour,
                      symbolPen=None, name=name[:24], connect="finite")  # fmt: skip
        blocks = lens.shape[0]
        step = max(1, -(-blocks // MAX_TICKS))
        self.getAxis("bottom").setTicks([[(i, str(i)) for i in range(0, blocks, step)]])
        self.setXRange(-0.3, max(blocks - 0.7, 0.7), padding=0)
        self.setYRange(0.0, 1.0, padding=0.02)
