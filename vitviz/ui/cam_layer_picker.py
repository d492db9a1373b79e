"""The CAM family's target layer beside the method (DESIGN §5): ``auto`` (with the layer it
reads on the shown model), the last block's norm1, norm2 and output, then every block's (a
post-norm block's norm1 said to follow its attention); any other ``BLOCK.PART`` can be typed."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QWidget

from vitviz.kindapi.feature_sites import DEFAULT_LAYER, PARTS, parse_layer

LAYER_PARAMETER = "layer"  # a CAM method's text parameter the picker sets


class CamLayerPicker(QComboBox):
    """An editable list of layers; ``chosen(text)`` when the user picks or types a valid one
    (a text that is not ``BLOCK.PART`` goes back to the last valid one)."""

    chosen = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setEditable(True)
        self.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        # as wide as the panel gives, not as its longest item: at 1280 × 720 the side panel
        # was cut sideways by a CAM's list (DESIGN §6)
        self.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.setMinimumContentsLength(14)
        self.setToolTip(
            "The layer the CAM reads: BLOCK.PART, a block from 0 (-1 the last) and its norm1, "
            "norm2 or output; auto: the last block's norm1 where it is a pre-norm (the tokens "
            "its attention reads), else its output (a post-norm block's norm1 follows its "
            "attention)"
        )
        self._valid = DEFAULT_LAYER
        self.auto, self.post_norm = "", frozenset[int]()
        self.set_blocks(1)
        self.activated.connect(lambda _i: self._take(self.currentText()))
        line = self.lineEdit()
        assert line is not None
        line.editingFinished.connect(lambda: self._take(line.text()))

    def set_blocks(self, blocks: int, auto: str = "", post_norm: Sequence[int] = ()) -> None:
        """Offer ``blocks`` blocks' parts (the model's), keeping the current layer; ``auto`` the
        layer ``auto`` reads on it ("": not said), ``post_norm`` its blocks whose norm1
        follows their attention."""
        self.blocks, self.auto, self.post_norm = blocks, auto, frozenset(post_norm)
        current = self._valid
        self.blockSignals(True)
        self.clear()
        self.addItem(self.words(DEFAULT_LAYER), DEFAULT_LAYER)
        for b in (-1, *range(max(0, blocks))):
            for part in PARTS:
                text = f"{b}.{part}"
                self.addItem(self.words(text), text)
        self.blockSignals(False)
        self.set_layer(current)

    def words(self, text: str) -> str:
        """A layer's canonical text as the list and the map's title show it: ``auto`` with the
        layer it reads, the last block named as such, a post-norm block's norm1 said to follow
        its attention (it is not the tokens the attention reads; DESIGN §5)."""
        if text == DEFAULT_LAYER:
            return f"{text} ({self.auto})" if self.auto else text
        try:
            choice = parse_layer(text)
        except ValueError:
            return text
        block = self.blocks - 1 if choice.block == -1 else choice.block
        notes = ["last block"] if choice.block == -1 else []
        if choice.part == "norm1" and block in self.post_norm:
            notes.append("after its attention")
        return f"{text} ({', '.join(notes)})" if notes else text

    def set_layer(self, text: str) -> None:
        """Show ``text`` (a layer's canonical text) without emitting ``chosen``."""
        self._valid = text
        self.blockSignals(True)
        index = self.findData(text)
        if index >= 0:
            self.setCurrentIndex(index)
        else:
            self.setEditText(text)
        self.blockSignals(False)

    def layer(self) -> str:
        return self._valid

    def fit(self, text: str) -> str:
        """``text`` as this model reads it: a block beyond its blocks is its last one (the
        Layer selector's rule, DESIGN §6); the user's text is kept to come back with a model
        that has that block."""
        try:
            choice = parse_layer(text)
        except ValueError:
            return text
        if choice.text == DEFAULT_LAYER or choice.block < self.blocks:
            return choice.text
        return f"{max(self.blocks - 1, 0)}.{choice.part}"

    def _take(self, text: str) -> None:
        index = self.findText(text)
        data = self.itemData(index) if index >= 0 else text.strip()
        try:
            value = parse_layer(str(data)).text
        except ValueError:
            self.set_layer(self._valid)
            return
        if value != self._valid:
            self.set_layer(value)
            self.chosen.emit(value)
        else:
            self.set_layer(value)
