"""Knock out: click heads of the head grid out of the model and watch the prediction (DESIGN §5,
"Interventions"), and colour the grid by each head's importance.

``KnockoutController`` adds the toolbar's "Knock out" toggle (then a click on a head tile
toggles it; Alt+click does at any time) with its ablation (zero or mean) beside it, "Restore
all" and "Head importance", and a status-bar line naming the knocked-out heads and the
ablation while the shown results come from the intervened model (and the effects shown, or
measured, on it); "Patch from…" takes a second image as the clean run and colours each tile by
its patching effect into the shown image. The engine does the work
(``vitviz.workers.interventions``); ``vitviz.ui.effect_tiles`` draws over the tiles, the
attention thumbnails, their colour bar and their scale's choice hidden meanwhile (no bar shown
describes colours that are not drawn). Effects are always the held model's: another
intervention (or image) clears them at once and measures them again; a result measured on
another model is not shown.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np
from PySide6.QtCore import QObject, Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QComboBox, QToolBar

from vitviz.ui.effect_tiles import (
    NO_MEAN_EFFECT,
    PATCH_UNIT,
    SCALE_IMPORTANCE_TIP,
    SCALE_PATCHING_TIP,
    ImportanceScale,
    KnockoutOverlay,
)
from vitviz.ui.elided_label import ElidedLabel
from vitviz.ui.head_grid import MEAN, HeadGrid
from vitviz.ui.view_state import NO_CLASSES
from vitviz.workers import interventions as jobs
from vitviz.workers.messages import ImageResult, ModelSummary

STATUS_STYLE = "QLabel { color: #1a1a1a; background: #ffb347; padding: 0 6px; }"


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
        self.effect: np.ndarray | None = None  # (L, H) of the model held now, or None
        self.prob: np.ndarray | None = None
        self.class_name = ""  # the class the effects shown are of
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
        self.patch_label = ""  # its file name
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
        self.client.userError.connect(self._on_error)
        self.client.failed.connect(self._on_error)

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

    def held(self) -> tuple[tuple[tuple[int, int], ...], str]:
        """The model asked for: its heads knocked out (sorted) and how ("zero" for none)."""
        heads = tuple(sorted(self.knocked))
        return heads, (self.mode if heads else "zero")

    def _on_ablation(self, _mode: str) -> None:
        if self.knocked:
            self._submit()
        elif self.effect_view() == "importance":  # it measures each head with this ablation
            self._forget_effects()
            self.request_importance()

    def _submit(self) -> int:
        """Ask the engine for the current heads knocked out (a mean ablation's values are
        the shown image's; the engine takes another image's own when it opens one). Effects
        shown were another model's: they go now, and are measured again on this one when its
        image arrives."""
        self._forget_effects()
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

    # -- the effect views ----------------------------------------------------------------------
    def effect_view(self) -> str | None:
        """ "patching" or "importance" while the grid shows (or waits for) effects, None while
        it shows attention (a model without classes greys both views: none)."""
        if self.patch_clean is not None and self.act_patch.isEnabled():
            return "patching"
        if self.act_importance.isChecked() and self.act_importance.isEnabled():
            return "importance"
        return None

    def _forget_effects(self) -> None:
        """The effects shown are no longer the held model's (or image's): gone at once."""
        self.effect = self.prob = None
        self._show()

    def _on_importance(self, on: bool) -> None:
        if on:
            self._end_patching()
            self.request_importance()
        self._forget_effects()

    def request_importance(self) -> int | None:
        if self.viewer.image is None:
            return None
        job = partial(
            jobs.head_importance, target_class=self.viewer.target_class, ablation=self.mode
        )
        return self.client.submit("interventions", job)

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
        the shown one, on the model as it is now (heads knocked out in both runs)."""
        if self.viewer.image is None:
            return None
        self.patch_clean, self.patch_label = str(path), Path(path).name
        self.act_patch.setChecked(True)
        self.act_importance.setChecked(False)
        self._forget_effects()
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
            self._forget_effects()
        elif isinstance(result, ImageResult):
            self._offer(bool(result.class_names))
            view = self.effect_view()
            if view is not None:  # the shown image's pass changed: measured again
                self.effect = self.prob = None
            self._show()
            if view == "importance":
                self.request_importance()
            elif view == "patching" and self.patch_clean is not None:
                self.patch_from(self.patch_clean)
        elif isinstance(result, jobs.HeadEffectsResult):
            ours = (result.knocked_out, result.knocked_ablation) == self.held()
            if self.effect_view() != "importance" or not ours or result.ablation != self.mode:
                return  # measured on another model, or another way: a newer one is asked for
            self.effect, self.prob = result.effect, result.effect_prob
            self.class_name = result.class_name
            self._show()
        elif isinstance(result, jobs.PatchingResult):
            ours = (result.knocked_out, result.knocked_ablation) == self.held()
            if self.effect_view() != "patching" or not ours:
                return  # measured on another model: the held one's is asked for
            if result.clean_label != self.patch_label:
                return
            self.effect, self.prob = result.effect, None
            self.class_name = result.class_name
            self._show()

    def _on_error(self, channel: str, _error: object) -> None:
        """The effects asked for can't come (the window says why): the grid's attention again."""
        if channel != "interventions" or self.effect is not None:
            return
        self.act_importance.setChecked(False)
        self._end_patching()
        self._show()

    def _offer(self, has_classes: bool) -> None:
        """Importance and patching measure a class: a model without classes (a backbone, a
        CLIP before its prompts) greys them with the reason, the user's choice kept (DESIGN §6)."""
        for action, tip in ((self.act_importance, IMPORTANCE_TIP), (self.act_patch, PATCH_TIP)):
            action.setEnabled(has_classes)
            action.setToolTip(tip if has_classes else f"{action.text()} {NO_CLASSES}")

    def _view_name(self, view: str) -> str:
        """The scale's name of ``view``: "Importance", "Patched from clean.png"."""
        return f"Patched from {self.patch_label}" if view == "patching" else "Importance"

    def _show(self) -> None:
        """The grid, the scale and the status line as the state says: effects (or their wait)
        in an effect view, else attention; the status line while heads are out, naming them,
        the ablation and the effects measured on that model."""
        view = self.effect_view()
        self.viewer.head_panel.show_thumbnails(view is None)
        self.overlay.show(self.knocked, self.effect if view else None, blank=view is not None)
        self.scale.setVisible(view is not None)
        self.act_restore.setEnabled(bool(self.knocked))
        heads, ablation = self.held()
        knocked = f"heads {heads_text(heads)} knocked out ({ablation} ablation)" if heads else ""
        if view is not None:
            name = self._view_name(view)
            if self.effect is None:
                self.scale.show_measuring(name, knocked)
            else:
                tip, unit = (
                    (SCALE_PATCHING_TIP, PATCH_UNIT) if view == "patching"
                    else (SCALE_IMPORTANCE_TIP, "logits")
                )  # fmt: skip
                self.scale.show_effects(
                    name, tip, self.overlay.levels, self.class_name, unit, knocked
                )
        if heads:
            n = len(heads)
            text = (
                f"Intervened model ({ablation} ablation): {n} head{'s' if n > 1 else ''} "
                f"knocked out: {heads_text(heads)}"
            )
            if view is not None:  # the grid's effects are its too (the scale says which)
                measured = self.effect is not None
                text += " · effects measured on it" if measured else " · measuring effects on it…"
            self.status.setText(text)
        self.status.setVisible(bool(heads))

    def _on_hover(self, info: object) -> None:
        if info is None:
            return
        layer, head, _ = info
        view = self.effect_view()
        extra = []
        if view is not None:  # the tiles' attention is not drawn: not said either
            info = (layer, head, float("nan"))
            value = self.overlay.value(layer, head)
            if head == MEAN:
                extra.append(NO_MEAN_EFFECT)
            elif value is not None and view == "patching":
                extra.append(f"patching effect {value:+.4g} (from {self.patch_label})")
            elif value is not None and self.prob is not None:
                change = float(self.prob[layer, head])
                extra.append(f"effect {value:+.4g} logits ({change:+.2%} probability)")
        if (layer, head) in self.knocked:
            extra.append("knocked out")
        if extra or view is not None:
            text = " · ".join([self.grid.describe(info), *extra])
            self.grid.setToolTip(text)
            self.viewer.hoverText.emit(text)
