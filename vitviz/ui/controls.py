"""The viewer's side panel: method and its parameters, layer/head/query, colour map, opacity."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSlider,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from vitviz.ui.colors import COLORMAPS
from vitviz.workers.messages import METHOD_LABELS, METHODS, MapParams

MEAN = -1


class ViewControls(QWidget):
    """Emits ``paramsChanged`` when anything that needs new maps changes, ``displayChanged``
    when only the picture changes (layer, head, colour map, opacity)."""

    paramsChanged = Signal()
    displayChanged = Signal()
    queryResetRequested = Signal()
    classResetRequested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.method = QComboBox()
        for m in METHODS:
            self.method.addItem(METHOD_LABELS[m], m)
        self.layer = QSpinBox()
        self.layer.setRange(1, 1)
        self.layer.setPrefix("layer ")
        self.head = QComboBox()
        self.head.addItem("mean of heads", MEAN)
        self.fusion = QComboBox()
        self.fusion.addItems(["mean", "max", "min"])
        self.discard = QDoubleSpinBox()
        self.discard.setRange(0.0, 0.99)
        self.discard.setSingleStep(0.05)
        self.discard.setDecimals(2)
        self.start_layer = QSpinBox()
        self.start_layer.setRange(1, 1)
        self.threshold = QDoubleSpinBox()
        self.threshold.setRange(0.05, 1.0)
        self.threshold.setSingleStep(0.05)
        self.threshold.setValue(0.6)
        self.query_label = QLabel("CLS token")
        self.query_reset = QPushButton("Reset to CLS")
        self.query_reset.clicked.connect(self.queryResetRequested)
        self.class_label = QLabel("top prediction")
        self.class_label.setWordWrap(True)
        self.class_reset = QPushButton("Top prediction")
        self.class_reset.clicked.connect(self.classResetRequested)
        self.colormap = QComboBox()
        self.colormap.addItems(list(COLORMAPS))
        self.opacity = QSlider(Qt.Orientation.Horizontal)
        self.opacity.setRange(0, 100)
        self.opacity.setValue(60)
        self.prefix_label = QLabel("")
        # three fixed lines: new text must not re-lay out the panel on every query change
        self.prefix_label.setWordWrap(True)
        self.prefix_label.setFixedHeight(3 * self.prefix_label.fontMetrics().lineSpacing() + 4)

        what = QGroupBox("Map")
        form = QFormLayout(what)
        form.addRow("Method", self.method)
        form.addRow("Layer", self.layer)
        form.addRow("Head", self.head)
        query_row = QHBoxLayout()
        query_row.addWidget(self.query_label, 1)
        query_row.addWidget(self.query_reset)
        form.addRow("Query", query_row)
        class_row = QHBoxLayout()
        class_row.addWidget(self.class_label, 1)
        class_row.addWidget(self.class_reset)
        form.addRow("Class", class_row)
        form.addRow("", self.prefix_label)

        method = QGroupBox("Rollout and relevance")
        mform = QFormLayout(method)
        mform.addRow("Head fusion", self.fusion)
        mform.addRow("Discard ratio", self.discard)
        mform.addRow("Start layer", self.start_layer)
        mform.addRow("Mask threshold", self.threshold)

        look = QGroupBox("Display")
        lform = QFormLayout(look)
        lform.addRow("Colour map", self.colormap)
        lform.addRow("Opacity", self.opacity)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(what)
        layout.addWidget(method)
        layout.addWidget(look)
        layout.addStretch(1)

        for w in (self.method, self.fusion):
            w.currentIndexChanged.connect(self.paramsChanged)
        for w in (self.discard, self.threshold):
            w.valueChanged.connect(self.paramsChanged)
        self.start_layer.valueChanged.connect(self.paramsChanged)
        self.layer.valueChanged.connect(self.displayChanged)
        self.head.currentIndexChanged.connect(self.displayChanged)
        self.colormap.currentIndexChanged.connect(self.displayChanged)
        self.opacity.valueChanged.connect(self.displayChanged)
        self.method.currentIndexChanged.connect(self._enable_for_method)
        self._enable_for_method()

    # -- model shape -----------------------------------------------------------------------------
    def set_shape(self, layers: int, heads: int) -> None:
        """Adapt the layer and head choices to a model, keeping the selection where possible."""
        for w in (self.layer, self.start_layer, self.head):
            w.blockSignals(True)
        self.layer.setRange(1, layers)
        self.start_layer.setRange(1, layers)
        current = self.head.currentData()
        self.head.clear()
        self.head.addItem("mean of heads", MEAN)
        for h in range(heads):
            self.head.addItem(f"head {h + 1}", h)
        index = self.head.findData(current if current is not None and current < heads else MEAN)
        self.head.setCurrentIndex(max(index, 0))
        for w in (self.layer, self.start_layer, self.head):
            w.blockSignals(False)

    # -- reading -------------------------------------------------------------------------------
    def params(self, query: tuple[int, int] | None, target_class: int | None) -> MapParams:
        return MapParams(
            query=query,
            method=self.method.currentData(),
            fusion=self.fusion.currentText(),
            discard_ratio=self.discard.value(),
            start_layer=self.start_layer.value() - 1,
            target_class=target_class,
            threshold=self.threshold.value(),
        )

    def selected_layer(self) -> int:
        return self.layer.value() - 1

    def selected_head(self) -> int:
        return int(self.head.currentData())

    def select(self, layer: int | None = None, head: int | None = None) -> None:
        if layer is not None:
            self.layer.setValue(layer + 1)
        if head is not None:
            self.head.setCurrentIndex(max(0, self.head.findData(head)))

    def step_head(self, delta: int) -> None:
        n = self.head.count()
        self.head.setCurrentIndex((self.head.currentIndex() + delta) % n)

    def step_layer(self, delta: int) -> None:
        self.layer.setValue(min(self.layer.maximum(), max(1, self.layer.value() + delta)))

    def colormap_name(self) -> str:
        return self.colormap.currentText()

    def opacity_value(self) -> float:
        return self.opacity.value() / 100.0

    def _enable_for_method(self) -> None:
        m = self.method.currentData()
        self.fusion.setEnabled(m == "rollout")
        self.discard.setEnabled(m in ("rollout", "gradient_rollout"))
        self.start_layer.setEnabled(m in ("rollout", "gradient_rollout", "relevance"))
        self.threshold.setEnabled(m == "dino_masks")
