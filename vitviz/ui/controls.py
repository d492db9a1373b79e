"""The viewer's side panel: method and its parameters, layer/head/query, colour map, opacity."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSlider,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from vitviz.ui.cam_layer_picker import LAYER_PARAMETER, CamLayerPicker
from vitviz.ui.colors import COLORMAPS
from vitviz.ui.lines_label import LinesLabel
from vitviz.ui.wheel_guard import guard_wheel
from vitviz.workers.messages import OLD_METHOD_NAMES, MapParams, MethodInfo, ParamInfo

TOOLTIP = Qt.ItemDataRole.ToolTipRole
MEAN = -1
SELECTION = ("layer", "head")  # parameters taken from the Layer and Head selectors above
ATTENTION = "attention"  # drawn from the head maps the window holds (its speed path)


def from_selection(p: ParamInfo) -> bool:
    """A method's layer or head index comes from the Layer/Head selectors (and grid clicks)."""
    return p.name in SELECTION and p.per == p.name


def map_reads(m: MethodInfo | None, ignored: dict[str, dict[str, str]], name: str) -> bool:
    """Whether method ``m``'s map reads selector ``name`` ("layer" or "head"): a parameter of
    its table entry taken from that selector which this model's version does not ignore."""
    if m is None:
        return False
    unused = ignored.get(m.name, {})
    return name not in unused and any(from_selection(p) and p.name == name for p in m.parameters)


def selector_words(
    m: MethodInfo | None, ignored: dict[str, dict[str, str]], name: str
) -> tuple[str, str]:
    """The (row label, tooltip) of the Layer or Head selector (``name``) under method ``m``,
    from its table parameters: the map's layer or head, or only the head grid's tile."""
    word = name.capitalize()
    if m is None or map_reads(m, ignored, name):
        return word, f"The {name} of the map (and the head grid's outlined tile)"
    why = ignored.get(m.name, {}).get(name)
    reason = (
        f"{m.label} does not use a {name} on this model: {why}"
        if why is not None
        else f"{m.label}'s map does not depend on a {name}"
    )
    return f"Grid {name}", f"Picks the head grid's outlined tile only: {reason}"


def from_layer_picker(p: ParamInfo) -> bool:
    """A CAM method's target layer (text ``BLOCK.PART``) comes from the picker beside the
    method (``CamLayerPicker``)."""
    return p.name == LAYER_PARAMETER and p.type == "str"


class ParamPanel(QGroupBox):
    """The selected method's parameters, one control each, built from its table entry; the
    values are kept per method while the window lives."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Method parameters", parent)
        self.form = QFormLayout(self)
        self.method: MethodInfo | None = None
        self.values: dict[str, dict[str, Any]] = {}
        self.widgets: dict[str, QWidget] = {}
        self.shape = (1, 1)  # the model's layers, heads
        # method -> {parameter this model ignores: why}
        self.ignored: dict[str, dict[str, str]] = {}

    def show_method(self, method: MethodInfo | None) -> None:
        self.method = method
        while self.form.rowCount():
            self.form.removeRow(0)
        self.widgets = {}
        shown = (
            []
            if method is None
            else [p for p in method.parameters if not (from_selection(p) or from_layer_picker(p))]
        )
        for p in shown:
            widget = self._widget(p)
            widget.setToolTip(p.help)
            why = self.ignored.get(method.name, {}).get(p.name)
            if why is not None:  # e.g. a Swin's rollout: the kind's reason, from the table
                widget.setEnabled(False)
                widget.setToolTip(f"{p.label}: not used on this model: {why}")
            self.widgets[p.name] = widget
            self.form.addRow(p.label, widget)
        if not shown:
            picked = (
                [] if method is None else [p.name for p in method.parameters if from_selection(p)]
            )
            selectors = f"{' and '.join(picked)}: the selector{'s' * (len(picked) > 1)} above"
            if method is None or not method.parameters:
                selectors = "none"
            elif any(map(from_layer_picker, method.parameters)):
                selectors = "the target layer: the picker above"
            self.form.addRow(QLabel(selectors))
        self.setTitle(f"{method.label}: parameters" if method is not None else "Method parameters")
        guard_wheel(self)  # the new controls too: the wheel scrolls the panel, not a value

    def current(self) -> dict[str, Any]:
        """The shown method's values (those set here; the rest keep the table's defaults); a
        layer or head beyond this model's is its last one, as its control shows it."""
        if self.method is None:
            return {}
        values = dict(self.values.get(self.method.name, {}))
        for p in self.method.parameters:
            if p.per is not None and isinstance(values.get(p.name), int):
                values[p.name] = min(values[p.name], self._top(p))
        return values

    def _top(self, p: ParamInfo) -> int:
        """The largest index of a per-layer or per-head parameter on this model."""
        layers, heads = self.shape
        return (layers if p.per == "layer" else heads) - 1

    def set_value(self, method: str, name: str, value: Any) -> None:
        self.values.setdefault(method, {})[name] = value

    def set_shape(self, layers: int, heads: int) -> None:
        self.shape = (layers, heads)
        self.show_method(self.method)

    # -- one control per parameter --------------------------------------------------------------
    def _value(self, p: ParamInfo) -> Any:
        assert self.method is not None
        return self.values.get(self.method.name, {}).get(p.name, p.default)

    def _store(self, p: ParamInfo, value: Any) -> None:
        assert self.method is not None
        self.set_value(self.method.name, p.name, value)
        self.changed.emit()

    def _widget(self, p: ParamInfo) -> QWidget:
        value = self._value(p)
        if p.choices is not None:
            combo = QComboBox()
            for c in p.choices:
                combo.addItem(str(c), c)
            combo.setCurrentIndex(max(0, combo.findData(value)))
            combo.currentIndexChanged.connect(lambda _i: self._store(p, combo.currentData()))
            return combo
        if p.type == "bool":
            box = QCheckBox()
            box.setChecked(bool(value))
            box.toggled.connect(lambda on: self._store(p, bool(on)))
            return box
        if p.type == "float":
            spin = QDoubleSpinBox()
            lo, hi = p.range if p.range is not None else (-1e9, 1e9)
            spin.setRange(lo, 1e9 if hi is None else hi)
            spin.setDecimals(3 if (p.step or 0.05) < 0.01 else 2)
            spin.setSingleStep(p.step or 0.05)
            spin.setValue(float(value))
            spin.valueChanged.connect(lambda v: self._store(p, float(v)))
            return spin
        if p.type == "int":
            return self._int_spin(p, int(value))
        text = QLineEdit(str(value))
        text.editingFinished.connect(lambda: self._store(p, text.text()))
        return text

    def _int_spin(self, p: ParamInfo, value: int) -> QSpinBox:
        """Layers and heads are shown counted from 0 (as the selectors, the CLI and the npz
        arrays count them); −1 as its meaning."""
        spin = QSpinBox()
        lo, hi = p.range if p.range is not None else (-(2**31) + 1, 2**31 - 1)
        if p.per is not None:
            top = self._top(p)
            spin.setRange(int(lo), top)
            if lo == -1:
                spin.setSpecialValueText("last layer" if p.per == "layer" else "mean of heads")
            spin.setValue(min(value, top))
            spin.valueChanged.connect(lambda v: self._store(p, int(v)))
            return spin
        spin.setRange(int(lo), int(2**31 - 1 if hi is None else hi))
        spin.setValue(value)
        spin.valueChanged.connect(lambda v: self._store(p, int(v)))
        return spin


class ViewControls(QWidget):
    """Emits ``paramsChanged`` when anything that needs new maps changes, ``displayChanged``
    when only the picture changes (layer, head, colour map, opacity)."""

    paramsChanged = Signal()
    displayChanged = Signal()
    queryResetRequested = Signal()
    classResetRequested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.methods: dict[str, MethodInfo] = {}
        self.wanted_method = ATTENTION  # selected once the table arrives from the engine
        self.method = QComboBox()
        self.method.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
        )
        self.method.setMinimumContentsLength(14)
        self.cam_layer = CamLayerPicker()  # a CAM method's target layer, beside the method
        self.layer = QSpinBox()
        self.layer.setRange(0, 0)  # counted from 0, as everywhere a user reads or types
        self.layer.setPrefix("layer ")
        self.head = QComboBox()
        self.head.addItem("mean of heads", MEAN)
        self.layer_word = "layer"  # the Layer selector's prefix ("block" for a Swin's)
        self.row_suffixes: list[str] = []  # per layer after its number ("", " · 1.2 SW")
        self.row_heads: list[int] = []  # heads per layer (they differ in a Swin's stages)
        self.param_panel = ParamPanel()
        # a probe's words are long: they wrap, not widen, in two steady lines (more only
        # while a narrow panel needs them: the row around it doesn't grow for a wrapped label)
        self.query_label = LinesLabel("CLS token", lines=2)
        self.query_reset = QPushButton("Reset to CLS")
        self.query_reset.clicked.connect(self.queryResetRequested)
        # two steady lines, as the query's: a long class name
        self.class_label = LinesLabel("top prediction", lines=2)
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
        form.addRow("Target layer", self.cam_layer)
        self._map_form = form
        self.layer_label, self.head_label = QLabel("Layer"), QLabel("Head")
        form.addRow(self.layer_label, self.layer)
        form.addRow(self.head_label, self.head)
        query_row = QHBoxLayout()
        query_row.addWidget(self.query_label, 1)
        query_row.addWidget(self.query_reset)
        form.addRow("Query", query_row)
        class_row = QHBoxLayout()
        class_row.addWidget(self.class_label, 1)
        class_row.addWidget(self.class_reset)
        form.addRow("Class", class_row)
        form.addRow("", self.prefix_label)

        look = QGroupBox("Display")
        lform = QFormLayout(look)
        lform.addRow("Colour map", self.colormap)
        lform.addRow("Opacity", self.opacity)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(what)
        layout.addWidget(self.param_panel)
        layout.addWidget(look)
        layout.addStretch(1)

        self.method.currentIndexChanged.connect(self._method_changed)
        self.cam_layer.chosen.connect(self._cam_layer_chosen)
        self._show_cam_layer()
        self.param_panel.changed.connect(self.paramsChanged)
        self.layer.valueChanged.connect(self._selection_changed)
        self.head.currentIndexChanged.connect(self._selection_changed)
        self.colormap.currentIndexChanged.connect(self.displayChanged)
        self.opacity.valueChanged.connect(self.displayChanged)

    # -- the method table ------------------------------------------------------------------------
    def set_methods(self, methods: list[MethodInfo]) -> None:
        """Fill the method list from the table (labels from it), keeping the selection."""
        current = self.wanted_method  # the user's choice (the list may show a nearer one)
        self.methods = {m.name: m for m in methods}
        self.method.blockSignals(True)
        self.method.clear()
        for m in methods:
            self.method.addItem(m.label, m.name)
            self.method.setItemData(self.method.count() - 1, m.description, TOOLTIP)
        self.method.setCurrentIndex(max(0, self.method.findData(current)))
        self.method.blockSignals(False)
        self._method_changed()

    def select_method(self, name: str) -> None:
        """Select ``name`` (an old settings name is migrated); kept until the table arrives."""
        name = OLD_METHOD_NAMES.get(name, name)
        self.wanted_method = name
        index = self.method.findData(name)
        if index >= 0:
            self.method.setCurrentIndex(index)

    def set_unavailable(self, reasons: dict[str, str]) -> None:
        """Disable the methods that can't run on the loaded model, saying why in a tooltip."""
        model = self.method.model()
        for i in range(self.method.count()):
            name = self.method.itemData(i)
            item = model.item(i) if isinstance(model, QStandardItemModel) else None
            if item is None:
                continue
            why = reasons.get(name)
            item.setEnabled(why is None)
            info = self.methods.get(name)
            item.setToolTip(why if why is not None else (info.description if info else ""))

    def show_method(self, name: str) -> None:
        """Show ``name`` in the list and its parameters without making it the user's choice
        (``wanted_method`` stays: a model that can run that one shows it again)."""
        index = self.method.findData(name)
        if index < 0 or index == self.method.currentIndex():
            return
        blocked = self.method.blockSignals(True)
        self.method.setCurrentIndex(index)
        self.method.blockSignals(blocked)
        self.param_panel.show_method(self.current_method())
        self._show_cam_layer()
        self._word_selectors()

    def current_method(self) -> MethodInfo | None:
        return self.methods.get(self.method.currentData())

    def method_name(self) -> str:
        return self.method.currentData() or self.wanted_method

    def uses_selection(self) -> bool:
        """The map itself depends on the Layer/Head selectors (not only what is drawn)."""
        m = self.current_method()
        return m is not None and m.name != ATTENTION and any(map(from_selection, m.parameters))

    def _method_changed(self) -> None:
        m = self.current_method()
        if m is not None:
            self.wanted_method = m.name
        self.param_panel.show_method(m)
        self._show_cam_layer()
        self._word_selectors()
        self.paramsChanged.emit()

    def _word_selectors(self) -> None:
        """The Layer and Head rows say whether the shown method's map reads them or they only
        pick the head grid's tile (from the method's table parameters, DESIGN §5)."""
        m, ignored = self.current_method(), self.param_panel.ignored
        for name, label, widget in (
            ("layer", self.layer_label, self.layer),
            ("head", self.head_label, self.head),
        ):
            text, tip = selector_words(m, ignored, name)
            label.setText(text)
            label.setToolTip(tip)
            widget.setToolTip(tip)

    def _show_cam_layer(self) -> None:
        """The target-layer picker, shown for a method that takes one, with its value."""
        m = self.current_method()
        p = None if m is None else next(filter(from_layer_picker, m.parameters), None)
        self._map_form.setRowVisible(self.cam_layer, p is not None)
        if m is not None and p is not None:
            self.cam_layer.set_layer(self.cam_layer.fit(str(self.param_panel.values.get(
                m.name, {}).get(p.name, p.default))))  # fmt: skip
            why = self.param_panel.ignored.get(m.name, {}).get(p.name)
            self.cam_layer.setEnabled(why is None)

    def _cam_layer_chosen(self, text: str) -> None:
        m = self.current_method()
        if m is None:
            return
        self.param_panel.set_value(m.name, LAYER_PARAMETER, text)
        self.paramsChanged.emit()

    def _selection_changed(self) -> None:
        if self.row_heads:
            self._fill_heads(self.row_heads[self.selected_layer()])
        if self.uses_selection():
            self.paramsChanged.emit()
        self.displayChanged.emit()

    # -- model shape -----------------------------------------------------------------------------
    def set_shape(
        self,
        layers: int,
        heads: int,
        cam_blocks: int | None = None,
        cam_auto: str = "",
        cam_post_norm: Sequence[int] = (),
    ) -> None:
        """Adapt the layer and head choices to a model, keeping the selection where possible;
        the CAM layer picker offers ``cam_blocks`` blocks (None: ``layers``), says the layer
        ``auto`` reads (``cam_auto``) and which blocks are post-norm (``cam_post_norm``)."""
        for w in (self.layer, self.head):
            w.blockSignals(True)
        self.layer.setRange(0, layers - 1)
        self.param_panel.set_shape(layers, heads)
        blocks = layers if cam_blocks is None else cam_blocks
        self.cam_layer.set_blocks(blocks, cam_auto, cam_post_norm)
        self._show_cam_layer()  # the method's target layer as this model reads it
        self._word_selectors()  # this model may ignore a layer or head the method takes
        self.layer.setPrefix(f"{self.layer_word} ")
        layer = self.selected_layer()
        self._fill_heads(self.row_heads[layer] if layer < len(self.row_heads) else heads)
        for w in (self.layer, self.head):
            w.blockSignals(False)

    def set_rows(self, word: str, suffixes: list[str], heads: list[int]) -> None:
        """The model's attention layers as the Layer selector walks them: ``word`` its prefix
        ("layer", "block"), per layer the words after its number (" · 1.2 SW") and its heads
        (the Head selector lists the selected layer's)."""
        self.layer_word, self.row_suffixes, self.row_heads = word, list(suffixes), list(heads)

    def _fill_heads(self, heads: int) -> None:
        """The Head selector's items for ``heads`` heads, keeping the selection if it exists."""
        layer = self.selected_layer()
        self.layer.setSuffix(self.row_suffixes[layer] if layer < len(self.row_suffixes) else "")
        if self.head.count() == heads + 1:
            return
        blocked = self.head.blockSignals(True)
        current = self.head.currentData()
        self.head.clear()
        self.head.addItem("mean of heads", MEAN)
        for h in range(heads):
            self.head.addItem(f"head {h}", h)
        index = self.head.findData(current if current is not None and current < heads else MEAN)
        self.head.setCurrentIndex(max(index, 0))
        self.head.blockSignals(blocked)

    # -- reading -------------------------------------------------------------------------------
    def params(self, query: tuple[int, int] | None, target_class: int | None) -> MapParams:
        m = self.current_method()
        attention = m is not None and m.name == ATTENTION
        values = self.param_panel.current() if attention else self.method_values()
        return MapParams(
            query=query,
            method=self.method_name(),
            values=tuple(sorted(values.items())),
            target_class=target_class,
        )

    def method_values(self) -> dict[str, Any]:
        """The shown method's parameter values, its layer and head from the selectors. (The
        maps of ``attention`` leave them out: every layer and head comes back at once.)"""
        values = self.param_panel.current()
        m = self.current_method()
        if m is not None:
            selection = {"layer": self.selected_layer(), "head": self.selected_head()}
            values.update({p.name: selection[p.name] for p in m.parameters if from_selection(p)})
            for p in filter(from_layer_picker, m.parameters):  # as the picker shows it
                if p.name in values:
                    values[p.name] = self.cam_layer.fit(str(values[p.name]))
        return values

    def selected_layer(self) -> int:
        return self.layer.value()

    def selected_head(self) -> int:
        return int(self.head.currentData())

    def select(self, layer: int | None = None, head: int | None = None) -> None:
        if layer is not None:
            self.layer.setValue(layer)
        if head is not None:
            self.head.setCurrentIndex(max(0, self.head.findData(head)))

    def step_head(self, delta: int) -> None:
        n = self.head.count()
        self.head.setCurrentIndex((self.head.currentIndex() + delta) % n)

    def step_layer(self, delta: int) -> None:
        self.layer.setValue(min(self.layer.maximum(), max(0, self.layer.value() + delta)))

    def colormap_name(self) -> str:
        return self.colormap.currentText()

    def opacity_value(self) -> float:
        return self.opacity.value() / 100.0
