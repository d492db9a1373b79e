"""Knock out: click heads of the head grid out of the model and watch the prediction (DESIGN §5,
"Interventions"), and colour the grid by each head's importance.

``KnockoutController`` adds the toolbar's "Knock out" toggle (then a click on a head tile
toggles it; Alt+click does at any time) with its ablation (zero or mean) beside it, "Restore
all" and "Head importance", and a status-bar line naming the knocked-out heads and the
ablation while the shown results come from the intervened model; "Patch from…" takes a second
image as the clean run and colours each tile by its patching effect into the shown image. The
engine does the work (``vitviz.workers.interventions``); this module only draws:
``KnockoutOverlay`` greys knocked-out tiles with a cross, and paints each tile in the
importance view on a diverging colour map whose scale sits above the grid.
"""

from __future__ import annotations

from functools import partial

import numpy as np
from PySide6.QtCore import QLineF, QObject, QRectF, Qt
from PySide6.QtGui import QAction, QBrush, QColor, QImage, QPen, QPixmap
from PySide6.QtWidgets import (
    QComboBox,
    QGraphicsLineItem,
    QGraphicsRectItem,
    QHBoxLayout,
    QLabel,
    QToolBar,
    QWidget,
)

from vitviz.imaging.colormaps import tick_text
from vitviz.imaging.effect_grid import diverging_colours, symmetric_levels
from vitviz.ui.elided_label import ElidedLabel
from vitviz.ui.head_grid import MEAN, HeadGrid
from vitviz.ui.view_state import NO_CLASSES
from vitviz.workers import interventions as jobs
from vitviz.workers.messages import ImageResult, ModelSummary

KNOCKED_FILL = QColor(40, 40, 40, 215)
CROSS_COLOR = QColor(255, 140, 60)
STATUS_STYLE = "QLabel { color: #1a1a1a; background: #ffb347; padding: 0 6px; }"
IMPORTANCE_ALPHA = 225
IMPORTANCE_TIP = (
    "Each head's effect on the shown class: its logit with every head minus its logit with that "
    "head knocked out alone (red: the head helps the class, blue: it hurts)"
)
PATCHING_TIP = (
    "Each head's patching effect: the shown image's pass with that head's output taken from the "
    "clean image's pass, (y(patched) − y(shown)) / (y(clean) − y(shown)) for the clean image's "
    "top class (1: the head alone carries the difference, 0: it carries none)"
)


def heads_text(heads: list[tuple[int, int]] | tuple[tuple[int, int], ...]) -> str:
    """'0.3, 2.1' (layer.head, 0-based), the first 8 and a count of the rest."""
    words = [f"{layer}.{head}" for layer, head in sorted(heads)]
    return ", ".join(words[:8]) + (f" and {len(words) - 8} more" if len(words) > 8 else "")


def knocked_words(heads: tuple[tuple[int, int], ...], ablation: str = "zero") -> str:
    """The map title's words for a model with ``heads`` knocked out, the ablation always named
    (a title without it could not be told from one that leaves it unsaid): "heads 0.2, 2.1
    knocked out (zero ablation)", "head 1.0 knocked out (mean ablation)"; "" for the model as
    it is."""
    if not heads:
        return ""
    noun = "heads" if len(heads) > 1 else "head"
    return f"{noun} {heads_text(heads)} knocked out ({ablation} ablation)"


class KnockoutOverlay:
    """Rectangles and crosses over a HeadGrid's tiles (in its view coordinates)."""

    def __init__(self, grid: HeadGrid) -> None:
        self.grid = grid
        self.knocked: set[tuple[int, int]] = set()
        self.effect: np.ndarray | None = None  # (L, H) shown as colours, or None
        self.levels = (-1.0, 1.0)
        self._items: list = []

    def show(self, knocked: set[tuple[int, int]], effect: np.ndarray | None) -> None:
        self.knocked, self.effect = set(knocked), effect
        if effect is not None:
            self.levels = symmetric_levels(effect)
        self.redraw()

    def redraw(self) -> None:
        vb = self.grid.vb
        for item in self._items:
            vb.removeItem(item)
        self._items = []
        L, H = self.grid.shape
        gh, gw = self.grid.layout.tile
        if self.effect is not None and self.effect.shape[0] == L:
            colours = diverging_colours(self.effect, self.levels)
            for layer, head in zip(*np.nonzero(np.isfinite(self.effect)), strict=True):
                if head >= H:
                    continue
                r, g, b = (int(c) for c in colours[layer, head])
                self._rect(int(layer), int(head), QColor(r, g, b, IMPORTANCE_ALPHA), gh, gw)
        for layer, head in self.knocked:
            if layer >= L or head >= H:
                continue
            x, y = self._rect(layer, head, KNOCKED_FILL, gh, gw)
            pen = QPen(CROSS_COLOR)
            pen.setCosmetic(True)
            pen.setWidthF(2.0)
            m = 0.2
            for line in (
                QLineF(x + m * gw, y + m * gh, x + (1 - m) * gw, y + (1 - m) * gh),
                QLineF(x + (1 - m) * gw, y + m * gh, x + m * gw, y + (1 - m) * gh),
            ):
                item = QGraphicsLineItem(line)
                item.setPen(pen)
                item.setZValue(22)
                vb.addItem(item)
                self._items.append(item)

    def _rect(self, layer: int, head: int, colour: QColor, gh: int, gw: int) -> tuple[int, int]:
        x, y = self.grid.layout.origin(layer, head + 1)
        item = QGraphicsRectItem(QRectF(x, y, gw, gh))
        item.setBrush(QBrush(colour))
        item.setPen(QPen(Qt.PenStyle.NoPen))
        item.setZValue(20)
        self.grid.vb.addItem(item)
        self._items.append(item)
        return x, y

    def value(self, layer: int, head: int) -> float | None:
        if self.effect is None or head == MEAN or layer >= self.effect.shape[0]:
            return None
        if head >= self.effect.shape[1] or not np.isfinite(self.effect[layer, head]):
            return None
        return float(self.effect[layer, head])


class ImportanceScale(QWidget):
    """The importance (or patching) view's colour scale: '−m [diverging bar] +m logits'."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.lo, self.bar, self.hi = QLabel(), QLabel(), QLabel()
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 8, 0)
        layout.setSpacing(3)
        self.title = QLabel("Importance:")
        layout.addWidget(self.title)
        for w in (self.lo, self.bar, self.hi):
            layout.addWidget(w)
        values = np.linspace(-1.0, 1.0, 96)[None].repeat(10, 0)
        rgb = np.ascontiguousarray(diverging_colours(values, (-1.0, 1.0)))
        image = QImage(rgb.data, 96, 10, 96 * 3, QImage.Format.Format_RGB888).copy()
        self.bar.setPixmap(QPixmap.fromImage(image))
        self.setToolTip(IMPORTANCE_TIP)

    def set_levels(
        self, levels: tuple[float, float], class_name: str, unit: str = "logits"
    ) -> None:
        self.lo.setText(tick_text(levels[0]))
        self.hi.setText(f"+{tick_text(levels[1])} {unit} ({class_name})".replace("  ", " "))

    def show_importance(self) -> None:
        self.title.setText("Importance:")
        self.setToolTip(IMPORTANCE_TIP)

    def show_patching(self, clean: str) -> None:
        self.title.setText(f"Patched from {clean}:")
        self.setToolTip(PATCHING_TIP)


IMPORTANCE_TIP = (
    "Colour each head tile by its effect on the shown class (each head knocked out alone); "
    "hover a tile for its value"
)
PATCH_TIP = (
    "Choose a second image as the clean run: each head tile is coloured by how much of the "
    "clean image's prediction that head carries into the shown image when patched in; hover "
    "a tile for its value"
)


class KnockoutController(QObject):
    """The window's knock-out mode and importance view, over its viewer's head grid."""

    def __init__(self, window) -> None:
        super().__init__(window)
        self.window, self.client, self.viewer = window, window.client, window.viewer
        self.grid: HeadGrid = self.viewer.head_grid
        self.overlay = KnockoutOverlay(self.grid)
        self.knocked: set[tuple[int, int]] = set()
        self.effect: np.ndarray | None = None
        self.prob: np.ndarray | None = None
        self.act_mode = QAction("Knock out", self, checkable=True)
        self.act_mode.setToolTip(
            "Knock heads out: click a head tile to remove that head from the model (Alt+click "
            "works at any time); predictions and maps then come from the intervened model"
        )
        self.ablation = QComboBox()
        self.ablation.setObjectName("knockoutAblation")
        self.ablation.addItems(["zero", "mean"])
        self.ablation.setToolTip(
            "What a knocked-out head's output becomes: 0 on every token, or its mean over the "
            "image's tokens"
        )
        self.ablation.currentTextChanged.connect(self._on_ablation)
        self.act_restore = QAction("Restore all", self)
        self.act_restore.setToolTip("Put every knocked-out head back")
        self.act_restore.setEnabled(False)
        self.act_restore.triggered.connect(self.restore_all)
        self.act_importance = QAction("Head importance", self, checkable=True)
        self.act_importance.setToolTip(IMPORTANCE_TIP)
        self.act_importance.toggled.connect(self._on_importance)
        self.act_patch = QAction("Patch from…", self, checkable=True)
        self.act_patch.setToolTip(PATCH_TIP)
        self.act_patch.triggered.connect(self._on_patch_action)
        self.patch_clean: str | None = None  # the clean image's path while the view is shown
        self.patch_label = ""
        toolbar = window.findChild(QToolBar, "mainToolbar")
        if toolbar is not None:
            toolbar.addSeparator()
            toolbar.addAction(self.act_mode)
            toolbar.addWidget(self.ablation)
            for act in (self.act_restore, self.act_importance, self.act_patch):
                toolbar.addAction(act)
        self.scale = ImportanceScale()
        self.scale.hide()
        self.viewer.head_panel.extras.addWidget(self.scale)
        self.status = ElidedLabel("")  # gives way to the model line when the bar is short
        self.status.setStyleSheet(STATUS_STYLE)
        self.status.hide()
        window.statusBar().addPermanentWidget(self.status)
        self.grid.scene().sigMouseClicked.connect(self._on_click)
        self.grid.cellHovered.connect(self._on_hover)
        self.grid.layoutChanged.connect(self.overlay.redraw)
        self.client.resultReady.connect(self._on_result)

    # -- knocking out --------------------------------------------------------------------------
    def toggle(self, layer: int, head: int) -> int:
        """Knock (layer, head) out, or put it back; the image is analysed again."""
        key = (layer, head)
        self.knocked.symmetric_difference_update({key})
        return self._submit()

    def restore_all(self) -> int | None:
        if not self.knocked:
            return None
        self.knocked.clear()
        return self._submit()

    @property
    def mode(self) -> str:
        """The ablation chosen beside the toggle: "zero" or "mean"."""
        return self.ablation.currentText()

    def _on_ablation(self, _mode: str) -> None:
        if self.knocked:
            self._submit()

    def _submit(self) -> int:
        """Ask the engine for the current heads knocked out (a mean ablation's values are
        the shown image's; the engine takes another image's own when it opens one)."""
        self._show()
        heads = tuple(sorted(self.knocked))
        job = partial(
            jobs.knock_out,
            heads=heads,
            gradients=self.viewer.needs_gradients(),
            ablation=self.mode,
        )
        return self.client.submit("image", job)

    def _on_click(self, event) -> None:
        if event.button() != Qt.MouseButton.LeftButton or self.grid.shape == (0, 0):
            return
        alt = bool(event.modifiers() & Qt.KeyboardModifier.AltModifier)
        if not (alt or self.act_mode.isChecked()) or event.double():
            return
        if not self.grid.vb.sceneBoundingRect().contains(event.scenePos()):
            return
        p = self.grid.vb.mapSceneToView(event.scenePos())
        cell = self.grid.cell_at(p.x(), p.y())
        heads = self.grid.row_heads()
        if cell is not None and cell[1] != MEAN and cell[1] < heads[cell[0]]:
            self.toggle(*cell)  # a head the layer has (a Swin's early rows have fewer)

    # -- importance -----------------------------------------------------------------------------
    def _on_importance(self, on: bool) -> None:
        if on:
            self._end_patching()
            self.request_importance()
        else:
            self.effect = self.prob = None
            self._show()

    def request_importance(self) -> int | None:
        if self.viewer.image is None:
            return None
        job = partial(
            jobs.head_importance, target_class=self.viewer.target_class, ablation=self.mode
        )
        return self.client.submit("interventions", job)

    # -- patching -------------------------------------------------------------------------------
    def _on_patch_action(self, checked: bool) -> None:
        if not checked:
            self._end_patching()
            self._show()
            return
        from vitviz.imaging import IMAGE_EXTENSIONS
        from vitviz.ui import file_dialogs

        images = "Images (" + " ".join(f"*{s}" for s in sorted(IMAGE_EXTENSIONS)) + ")"
        path = file_dialogs.open_file(
            self.window, self.window.settings, "images", "Patch from (the clean image)",
            f"{images};;All files (*)",
        )  # fmt: skip
        if not path:
            self.act_patch.setChecked(self.patch_clean is not None)
            return
        self.patch_from(path)

    def patch_from(self, path: str) -> int | None:
        """Show each head's patching effect from the image at ``path`` (the clean run) into
        the shown one."""
        if self.viewer.image is None:
            return None
        self.patch_clean = str(path)
        self.act_patch.setChecked(True)
        self.act_importance.setChecked(False)
        job = partial(jobs.head_patching, clean=self.patch_clean)
        return self.client.submit("interventions", job)

    def _end_patching(self) -> None:
        if self.patch_clean is None:
            return
        self.patch_clean = None
        self.act_patch.setChecked(False)
        self.effect = self.prob = None

    # -- results -------------------------------------------------------------------------------
    def _on_result(self, channel: str, result: object) -> None:
        if isinstance(result, ModelSummary) and channel == "model":
            self.knocked.clear()  # the engine restored every head with the model
            self._end_patching()
            self.effect = self.prob = None
            self._show()
        elif isinstance(result, ImageResult):
            self._offer(bool(result.class_names))
            self.overlay.redraw()
            if not result.class_names:
                return  # nothing to measure: the choice waits for a model with classes
            if self.act_importance.isChecked():
                self.request_importance()
            elif self.patch_clean is not None:  # the shown image's pass changed: again
                self.patch_from(self.patch_clean)
        elif isinstance(result, jobs.HeadEffectsResult):
            if not self.act_importance.isChecked():
                return
            self.effect, self.prob = result.effect, result.effect_prob
            self._show()
            self.scale.show_importance()
            self.scale.set_levels(self.overlay.levels, result.class_name)
        elif isinstance(result, jobs.PatchingResult):
            if self.patch_clean is None:
                return
            self.effect, self.prob = result.effect, None
            self.patch_label = result.clean_label
            self._show()
            self.scale.show_patching(result.clean_label)
            self.scale.set_levels(self.overlay.levels, result.class_name, unit="")

    def _offer(self, has_classes: bool) -> None:
        """Importance and patching measure a class: a model without classes (a backbone, a
        CLIP before its prompts) greys them with the reason, the user's choice kept (DESIGN §6)."""
        for action, tip in ((self.act_importance, IMPORTANCE_TIP), (self.act_patch, PATCH_TIP)):
            action.setEnabled(has_classes)
            action.setToolTip(tip if has_classes else f"{action.text()} {NO_CLASSES}")

    def _show(self) -> None:
        self.overlay.show(self.knocked, self.effect)
        self.scale.setVisible(self.effect is not None)
        self.act_restore.setEnabled(bool(self.knocked))
        if self.knocked:
            n = len(self.knocked)
            self.status.setText(
                f"Intervened model ({self.mode} ablation): {n} head{'s' if n > 1 else ''} "
                f"knocked out: {heads_text(tuple(self.knocked))}"
            )
        self.status.setVisible(bool(self.knocked))

    def _on_hover(self, info: object) -> None:
        if info is None:
            return
        layer, head, _ = info
        extra = []
        value = self.overlay.value(layer, head)
        if value is not None and self.patch_clean is not None:
            extra.append(f"patching effect {value:+.4g} (from {self.patch_label})")
        elif value is not None and self.prob is not None:
            extra.append(
                f"effect {value:+.4g} logits ({float(self.prob[layer, head]):+.2%} probability)"
            )
        if (layer, head) in self.knocked:
            extra.append("knocked out")
        if extra:
            text = f"{self.grid.describe(info)} · {' · '.join(extra)}"
            self.grid.setToolTip(text)
            self.viewer.hoverText.emit(text)
