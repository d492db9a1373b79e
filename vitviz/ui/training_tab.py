"""The Training tab: configure a short ViT run, start it, watch curves and attention form, keep it.

The run is a child process (vitviz.training via workers.training.TrainingRunner); this tab only
turns settings into a TrainConfig and events into pictures.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QImage, QPixmap
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from vitviz.imaging.overlay import overlay_on_image
from vitviz.kindapi.sides import TrainingField
from vitviz.training import (
    PRESETS,
    RunRecord,
    TrainConfig,
    TrainingConfigError,
    list_runs,
    preset_for_dataset,
    read_run,
    validate_training_config,
)
from vitviz.training.config import KIND_FIELDS, MODEL_KINDS, PRESET_LABELS, training_side
from vitviz.training.events import (
    CheckpointEvent,
    EpochEvent,
    FinishedEvent,
    LogEvent,
    ProbeEvent,
    RunStarted,
    StepEvent,
)
from vitviz.training.runs import read_probes, read_steps
from vitviz.ui import file_dialogs
from vitviz.ui.charts import LegendBelow
from vitviz.ui.form_panel import FoldingGroup, VerticalScrollArea
from vitviz.ui.plot_axes import CountAxis, plain_axes
from vitviz.ui.settings import AppSettings
from vitviz.ui.wheel_guard import guard_wheel
from vitviz.workers.training import TrainingRunner

DATASETS = (
    ("shapes", "Synthetic shapes (built in)"),
    ("folder", "Image folder (one per class)"),
    ("cifar10", "CIFAR-10 batches folder"),
    ("random", "Random data (smoke test)"),
)
PROBE_SIZE = 96


class RunsList(QListWidget):
    """The runs list: it asks for four rows (the curves above take the room a small window
    has; a larger one shares it out, ``_build_monitor``'s stretches)."""

    def sizeHint(self) -> QSize:
        hint = super().sizeHint()
        return QSize(hint.width(), 4 * self.fontMetrics().lineSpacing() + 8)


def _spin(lo: int, hi: int, value: int, step: int = 1, special: str | None = None) -> QSpinBox:
    w = QSpinBox()
    w.setRange(lo, hi)
    w.setSingleStep(step)
    w.setValue(value)
    if special:
        w.setSpecialValueText(special)
    return w


def _dspin(lo: float, hi: float, value: float, step: float, decimals: int) -> QDoubleSpinBox:
    w = QDoubleSpinBox()
    w.setDecimals(decimals)
    w.setRange(lo, hi)
    w.setSingleStep(step)
    w.setValue(value)
    return w


NO_RUN_NOTE = "No run yet"
NO_POINTS_NOTE = "No points yet"  # a run shown (running, or picked from the list) without any


def _format_eta(seconds: float) -> str:
    if not math.isfinite(seconds) or seconds < 0:
        return "–"
    m, s = divmod(round(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def _run_text(name: str, status: str, metrics: list[dict[str, Any]]) -> str:
    """One row of the runs list: name, status, epochs done and the best validation accuracy."""
    accs = [m["val_acc"] for m in metrics if isinstance(m.get("val_acc"), (int, float))]
    best = f"{max(accs):.1%}" if accs else "–"
    epochs = f"{len(metrics)} epoch" + ("" if len(metrics) == 1 else "s")
    return f"{name} · {status} · {epochs} · best {best}"


FormWidget = QSpinBox | QDoubleSpinBox | QComboBox | QLineEdit


def _ints_edit() -> QLineEdit:
    """Per-stage numbers typed as '48,96,192'."""
    w = QLineEdit()
    w.setPlaceholderText("one per stage, e.g. 48,96,192")
    return w


def _choices(*items: str) -> Callable[[], QComboBox]:
    def make() -> QComboBox:
        w = QComboBox()
        w.addItems(list(items))
        return w

    return make


@dataclass(frozen=True)
class FormField:
    """One row of the form: the tab's widget attribute, its TrainConfig field, where it goes."""

    attr: str
    field: str
    label: str
    group: str  # a key of GROUPS
    make: Callable[[], FormWidget]
    optional: bool = False  # 0 is shown as "default" and means None
    more: bool = False  # rarely changed: folded away under "More settings"

    def write(self, widget: FormWidget, value: Any) -> None:
        if isinstance(widget, QComboBox):
            text = str(value)
            widget.setCurrentIndex(max(0, widget.findText(text)))
        elif isinstance(widget, QLineEdit):
            widget.setText(",".join(str(v) for v in value))
        elif isinstance(widget, QSpinBox):
            widget.setValue(int(value or 0))  # None: "default" (optional fields)
        else:
            widget.setValue(float(value))

    def read(self, widget: FormWidget) -> Any:
        if isinstance(widget, QComboBox):
            return widget.currentText()
        if isinstance(widget, QLineEdit):
            try:
                return tuple(int(v) for v in widget.text().split(","))
            except ValueError:
                raise ValueError(
                    f"{self.label}: whole numbers separated by commas, got {widget.text()!r}"
                ) from None
        value = widget.value()
        return (value or None) if self.optional else value


def _kind_row(f: TrainingField) -> FormField:
    """A row of the model group for a kind's own setting, its widget from the field's editor."""
    low, high, step = f.limits
    make: Callable[[], FormWidget]
    if f.editor == "ints":
        make = _ints_edit
    elif f.editor == "choice":
        make = _choices(*f.choices)
    elif f.editor == "float":
        make = partial(_dspin, low, high, float(f.default or 0), step, f.decimals)  # type: ignore[arg-type]
    else:
        make = partial(_spin, int(low), int(high), int(f.default or 0), int(step))  # type: ignore[arg-type]
    return FormField(f.name, f.name, f.label, "model", make, more=f.more)


GROUPS = (
    ("data", "Data"),
    ("model", "Model"),
    ("optim", "Optimiser (AdamW, warmup + cosine)"),
    ("device", "Device"),
)

# The form <-> TrainConfig mapping, written once: widgets, rows, set_config and config read it.
FIELDS = (
    FormField("train_size", "train_size", "Training images", "data",
              lambda: _spin(0, 10_000_000, 0, 1000, "default"), optional=True, more=True),
    FormField("val_size", "val_size", "Validation images", "data",
              lambda: _spin(0, 1_000_000, 0, 100, "default"), optional=True, more=True),
    FormField("seed", "seed", "Seed", "data", lambda: _spin(0, 2**31 - 1, 0), more=True),
    FormField("model_choice", "model", "Model", "model", _choices(*MODEL_KINDS)),
    FormField("image_size", "image_size", "Image size", "model", lambda: _spin(8, 1024, 32, 8)),
    FormField("patch_size", "patch_size", "Patch size", "model", lambda: _spin(1, 64, 8)),
    *(_kind_row(f) for f in KIND_FIELDS if not f.more),
    FormField("mlp_ratio", "mlp_ratio", "MLP ratio", "model",
              lambda: _dspin(0.5, 8.0, 4.0, 0.5, 1), more=True),
    *(_kind_row(f) for f in KIND_FIELDS if f.more),
    FormField("drop_path", "drop_path_rate", "Stochastic depth", "model",
              lambda: _dspin(0.0, 0.9, 0.1, 0.05, 2), more=True),
    FormField("epochs_box", "epochs", "Epochs", "optim", lambda: _spin(1, 10_000, 10)),
    FormField("batch_size", "batch_size", "Batch size", "optim", lambda: _spin(1, 8192, 64, 16)),
    FormField("lr", "lr", "Learning rate", "optim", lambda: _dspin(1e-6, 1.0, 1e-3, 1e-4, 6)),
    FormField("weight_decay", "weight_decay", "Weight decay", "optim",
              lambda: _dspin(0.0, 1.0, 0.05, 0.01, 3), more=True),
    FormField("warmup", "warmup_epochs", "Warmup epochs", "optim",
              lambda: _dspin(0.0, 100.0, 1.0, 0.5, 1), more=True),
    FormField("label_smoothing", "label_smoothing", "Label smoothing", "optim",
              lambda: _dspin(0.0, 0.5, 0.1, 0.05, 2), more=True),
    FormField("grad_clip", "grad_clip", "Gradient clip", "optim",
              lambda: _dspin(0.0, 100.0, 1.0, 0.5, 2), more=True),
    FormField("device", "device", "Device", "device", _choices("auto", "cpu", "cuda", "mps")),
    FormField("compile_choice", "compile", "torch.compile", "device", _choices("auto", "on", "off"),
              more=True),
)  # fmt: skip


class TrainingTab(QWidget):
    openCheckpoint = Signal(object)  # Path of a checkpoint to open in the viewer
    compareCheckpoints = Signal(object, object)  # Paths: epoch 1's in the viewer, B the best
    message = Signal(str)  # short user messages for the window's message bar

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.runner = TrainingRunner(self)
        self.base_config = TrainConfig()  # what the form doesn't show comes from here
        self.run_dir: Path | None = None
        self.step_x: list[float] = []
        self.step_loss: list[float] = []
        self.epochs: list[dict[str, float]] = []
        self.steps_per_epoch = 1
        self._cancelling = False
        self.app_settings: AppSettings | None = None  # where file dialogs open (the window's)
        self._build_settings()
        self._build_monitor()
        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(self.settings_column)
        splitter.addWidget(self.monitor)
        splitter.setCollapsible(0, False)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([self.settings_column.sizeHint().width(), 1000])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(splitter)
        self.runner.eventReceived.connect(self._on_event)
        self.runner.runningChanged.connect(self._on_running)
        self.apply_preset(preset_for_dataset(self.dataset_kind.currentData()))
        self.refresh_runs()
        self._mark_empty()
        self.epochs_box.valueChanged.connect(lambda _v: self._mark_empty(again=True))
        guard_wheel(self)

    # -- building -------------------------------------------------------------------------------
    def _build_settings(self) -> None:
        """The settings column: the preset, then one folding group per kind of setting, in a
        vertical scroll; Start and Cancel in a bar below it that never scrolls away."""
        self.preset = QComboBox()
        for key in PRESETS:
            self.preset.addItem(PRESET_LABELS.get(key, key), key)
        self.preset.activated.connect(lambda _i: self.apply_preset(self.preset.currentData()))
        self.preset.setToolTip(
            "Sets every field below; change any of them afterwards. Choosing a dataset "
            "chooses the preset made for it."
        )
        self.dataset_kind = QComboBox()
        for key, label in DATASETS:
            self.dataset_kind.addItem(label, key)
        self.dataset_path = QLineEdit()
        self.dataset_path.setPlaceholderText("dataset folder")
        self.browse_button = QPushButton("Browse…")
        self.browse_button.clicked.connect(self._browse)
        path_row = QHBoxLayout()
        path_row.addWidget(self.dataset_path, 1)
        path_row.addWidget(self.browse_button)
        self.dataset_kind.currentIndexChanged.connect(self._on_dataset_kind)
        self.dataset_kind.activated.connect(self._on_dataset_chosen)

        self.fields: dict[str, FormWidget] = {}
        for f in FIELDS:
            self.fields[f.field] = f.make()
            setattr(self, f.attr, self.fields[f.field])
        self.model_choice.currentIndexChanged.connect(self._on_model_kind)
        self.compile_choice.setToolTip(
            "torch.compile of the training step. auto: on a CUDA GPU only, where it fuses the "
            "many small kernels of a small ViT; on: the CPU too (the first steps wait for a C++ "
            "build). A compile that fails is logged and training goes on without it."
        )
        self.groups = {key: FoldingGroup(title) for key, title in GROUPS}
        self.groups["data"].add_row("Dataset", self.dataset_kind)
        self.groups["data"].add_row("Folder", path_row)
        for f in FIELDS:
            self.groups[f.group].add_row(f.label, self.fields[f.field], more=f.more)

        panel = QWidget()
        v = QVBoxLayout(panel)
        preset_row = QFormLayout()
        preset_row.addRow("Preset", self.preset)
        v.addLayout(preset_row)
        for group in self.groups.values():
            v.addWidget(group)
        v.addStretch(1)
        self.settings_scroll = VerticalScrollArea(panel)

        self.start_button = QPushButton("Start training")
        self.start_button.setDefault(True)
        self.start_button.clicked.connect(self.start)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.cancel)
        self.problems = QLabel("")
        self.problems.setWordWrap(True)
        self.problems.setStyleSheet("color: #b00020;")
        self.problems.setVisible(False)
        buttons = QHBoxLayout()
        buttons.addWidget(self.start_button, 1)
        buttons.addWidget(self.cancel_button)
        bar = QFrame()
        bar.setFrameShape(QFrame.Shape.StyledPanel)
        b = QVBoxLayout(bar)
        b.setContentsMargins(8, 6, 8, 6)
        b.addLayout(buttons)
        b.addWidget(self.problems)
        self.settings_column = QWidget()
        column = QVBoxLayout(self.settings_column)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(0)
        column.addWidget(self.settings_scroll, 1)
        column.addWidget(bar)
        self._on_dataset_kind()
        self._on_model_kind()

    def _build_monitor(self) -> None:
        self.status = QLabel("No run yet. Pick settings and press Start training.")
        self.status.setWordWrap(True)  # long messages (a failure) wrap instead of being cut
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setValue(0)
        self.eta = QLabel("")
        widest = self.eta.fontMetrics().horizontalAdvance("ETA 0:00:00 · 00,000 img/s")
        self.eta.setMinimumWidth(widest + 4)  # steady: the bar doesn't jump with every step
        top = QHBoxLayout()
        top.addWidget(self.status, 3)
        top.addWidget(self.progress, 2)
        top.addWidget(self.eta)
        # epochs are counted: whole-number ticks (an empty plot's 0 to 1 never reads "0.2")
        self.loss_plot = pg.PlotWidget(title="Loss", axisItems={"bottom": CountAxis()})
        self.acc_plot = pg.PlotWidget(title="Accuracy", axisItems={"bottom": CountAxis()})
        for plot, label in ((self.loss_plot, "loss"), (self.acc_plot, "accuracy")):
            plot.setBackground("#fafafa")
            plot.setAcceptDrops(False)
            plot.showGrid(x=True, y=True, alpha=0.2)
            plot.setLabel("bottom", "epoch")
            plot.setLabel("left", label)
            plain_axes(plot)
            LegendBelow(plot, 3)
        self.acc_plot.setYRange(0, 1)
        self.curve_step = self.loss_plot.plot(
            pen=pg.mkPen("#9ecae1", width=1), name="train (steps)"
        )
        self.curve_train = self.loss_plot.plot(
            pen=pg.mkPen("#3182bd", width=2), symbol="o", symbolSize=5, name="train (epoch)"
        )
        self.curve_val = self.loss_plot.plot(
            pen=pg.mkPen("#e6550d", width=2), symbol="o", symbolSize=5, name="validation"
        )
        self.curve_train_acc = self.acc_plot.plot(
            pen=pg.mkPen("#3182bd", width=2), symbol="o", symbolSize=5, name="train"
        )
        self.curve_val_acc = self.acc_plot.plot(
            pen=pg.mkPen("#e6550d", width=2), symbol="o", symbolSize=5, name="validation"
        )
        self.empty_notes = {}  # plot -> its "No run yet" note, shown while it has no curve
        for plot in (self.loss_plot, self.acc_plot):
            note = pg.TextItem(NO_RUN_NOTE, color="#888", anchor=(0.5, 0.5))
            plot.addItem(note, ignoreBounds=True)
            self.empty_notes[plot] = note
        self._empty: bool | None = None
        curves = QSplitter(Qt.Orientation.Horizontal)
        curves.addWidget(self.loss_plot)
        curves.addWidget(self.acc_plot)

        self.probe_strip = QHBoxLayout()
        self.probe_strip.addStretch(1)
        strip_widget = QWidget()
        strip_widget.setLayout(self.probe_strip)
        self.probe_scroll = QScrollArea()
        self.probe_scroll.setWidgetResizable(True)
        self.probe_scroll.setWidget(strip_widget)
        self.probe_scroll.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        bar = self.probe_scroll.horizontalScrollBar()
        self.probe_scroll.setFixedHeight(PROBE_SIZE + 56 + bar.sizeHint().height())
        self._probe_follow = True  # keep the newest epoch in view unless the user scrolled back
        bar.rangeChanged.connect(lambda _lo, _hi: self._show_newest_probes())
        self.probe_labels: list[QWidget] = []

        # Short texts, so the window can still be made narrow; the tooltips say where they open.
        self.open_best = QPushButton("Open best")
        self.open_best.setToolTip("Open the run's best checkpoint (validation) in the Viewer tab")
        self.open_last = QPushButton("Open latest")
        self.open_last.setToolTip("Open the run's latest checkpoint in the Viewer tab")
        self.compare_first = QPushButton("Epoch 1 vs best")
        self.compare_first.setToolTip(
            "Open epoch 1's checkpoint in the Viewer tab and compare it with the best one "
            "(as File ▸ Compare with…)"
        )
        self.compare_first.clicked.connect(self._compare_first)
        self.open_best.clicked.connect(lambda: self._open("best"))
        self.open_last.clicked.connect(lambda: self._open("last"))
        self.runs = RunsList()
        self.runs.setMaximumHeight(140)
        self.runs.setMinimumHeight(2 * self.runs.fontMetrics().lineSpacing() + 8)
        self.runs.currentItemChanged.connect(self._on_run_selected)
        refresh = QPushButton("Refresh")
        refresh.clicked.connect(self.refresh_runs)
        run_buttons = QHBoxLayout()
        run_buttons.addWidget(QLabel("<b>Runs</b>"))
        run_buttons.addStretch(1)
        run_buttons.addWidget(refresh)
        run_buttons.addWidget(self.open_best)
        run_buttons.addWidget(self.open_last)
        compare_row = QHBoxLayout()  # its own row: the runs row keeps the window's least width
        compare_row.addStretch(1)
        compare_row.addWidget(self.compare_first)

        self.monitor = QWidget()
        v = QVBoxLayout(self.monitor)
        v.addLayout(top)
        v.addWidget(curves, 4)
        probe_title = QLabel("<b>Attention on a fixed probe image</b> (rollout, one per epoch)")
        probe_title.setWordWrap(True)
        v.addWidget(probe_title)
        v.addWidget(self.probe_scroll)
        v.addLayout(run_buttons)
        v.addWidget(self.runs, 1)
        v.addLayout(compare_row)
        self._update_open_buttons()

    # -- settings <-> config ------------------------------------------------------------------
    def apply_preset(self, name: str) -> None:
        cfg = TrainConfig(**PRESETS[name])
        self.preset.setCurrentIndex(max(0, self.preset.findData(name)))
        self.set_config(cfg)

    def set_config(self, cfg: TrainConfig) -> None:
        """Show ``cfg`` in the form; its settings the form has no field for (e.g. augmentation)
        are kept for ``config``."""
        self.base_config = cfg
        kind, _, path = cfg.dataset.partition(":")
        self.dataset_kind.setCurrentIndex(max(0, self.dataset_kind.findData(kind)))
        self.dataset_path.setText(path)
        for f in FIELDS:
            value = getattr(cfg, f.field)
            if f.field == "device" and value not in ("auto", "cpu", "cuda", "mps"):
                value = "auto"
            f.write(self.fields[f.field], value)

    def config(self) -> TrainConfig:
        kind = self.dataset_kind.currentData()
        path = self.dataset_path.text().strip()
        dataset = f"{kind}:{path}" if kind in ("folder", "cifar10") else kind
        values = {f.field: f.read(self.fields[f.field]) for f in FIELDS}
        return self.base_config.replace(
            dataset=dataset, command="vitviz window: Training tab", **values
        )

    def _on_dataset_kind(self) -> None:
        needs_path = self.dataset_kind.currentData() in ("folder", "cifar10")
        self.dataset_path.setEnabled(needs_path)

    def _on_dataset_chosen(self) -> None:
        """The user chose a dataset: the form takes the preset made for it (unless the chosen
        kind keeps its own, as a Swin's does), keeping the dataset and its folder."""
        kind, path = self.dataset_kind.currentData(), self.dataset_path.text()
        preset = preset_for_dataset(kind)
        keeps = training_side(self.model_choice.currentText()).keeps_preset_on_dataset
        if keeps or self.preset.currentData() == preset:
            return
        self.apply_preset(preset)
        self.dataset_kind.setCurrentIndex(self.dataset_kind.findData(kind))
        self.dataset_path.setText(path)

    def _on_model_kind(self) -> None:
        """Only the fields the chosen model reads are shown (and editable): the shared ones and
        its kind's."""
        own = {f.name for f in training_side(self.model_choice.currentText()).fields}
        kind_fields = {f.name for f in KIND_FIELDS}
        for f in FIELDS:
            if f.field in kind_fields and f.group in getattr(self, "groups", {}):
                self.groups[f.group].show_row(self.fields[f.field], f.field in own)
        for f in KIND_FIELDS:
            self.fields[f.name].setEnabled(f.name in own)

    def _browse(self) -> None:
        text = self.dataset_path.text()
        folder = file_dialogs.open_folder(
            self, self.app_settings, "datasets", "Dataset folder", text
        )
        if folder:
            self.dataset_path.setText(folder)

    # -- run control -----------------------------------------------------------------------------
    def start(self) -> bool:
        """Check the settings, then start the run; refuse with the reasons before anything runs."""
        try:
            cfg = self.config()
        except (TypeError, ValueError) as exc:
            self._show_problem(str(exc))
            return False
        problems = validate_training_config(cfg)
        if problems:
            self._show_problem("Can't start: " + " ".join(problems))
            return False
        self._show_problem("")
        self._reset_monitor()
        try:
            handle = self.runner.start(cfg)
        except TrainingConfigError as exc:
            self._show_problem(f"Can't start: {exc}")
            return False
        self.run_dir = handle.run_dir
        self._mark_empty(again=True)  # "No points yet" until its first step
        self.status.setText(f"Starting… ({handle.run_dir.name})")
        self.progress.setFormat("%p%")
        self.refresh_runs()  # the new run is listed (running) from its start
        return True

    def cancel(self) -> None:
        if not self.runner.is_running():
            return
        self._cancelling = True
        self.runner.cancel()
        self.status.setText("Cancelling…")
        self.progress.setFormat("Cancelling…")
        self.eta.setText("")

    def _show_problem(self, text: str) -> None:
        self.problems.setText(text)
        self.problems.setVisible(bool(text))

    def _on_running(self, running: bool) -> None:
        self.start_button.setEnabled(not running)
        self.cancel_button.setEnabled(running)
        if not running:
            self.refresh_runs()

    # -- events -----------------------------------------------------------------------------------
    def _reset_monitor(self) -> None:
        self.step_x, self.step_loss, self.epochs = [], [], []
        for curve in (
            self.curve_step,
            self.curve_train,
            self.curve_val,
            self.curve_train_acc,
            self.curve_val_acc,
        ):
            curve.setData([], [])
        for label in self.probe_labels:
            self.probe_strip.removeWidget(label)
            label.deleteLater()
        self.probe_labels = []
        self._mark_empty()
        self.progress.setValue(0)
        self.progress.setFormat("%p%")
        self.eta.setText("")
        self._cancelling = False

    def _mark_empty(self, again: bool = False) -> None:
        """Plots without a curve say "No run yet" over whole epochs 0 to the planned number;
        the first point of a run hides the note and gives the axes back to the curves."""
        curves = (self.curve_step, self.curve_train, self.curve_val)
        curves += (self.curve_train_acc, self.curve_val_acc)
        empty = all(c.xData is None or len(c.xData) == 0 for c in curves)
        if empty == self._empty and not (empty and again):
            return
        self._empty = empty
        planned = max(1, self.epochs_box.value())
        shown_run = self.run_dir is not None or self.runs.currentItem() is not None
        for plot, note in self.empty_notes.items():
            note.setText(NO_POINTS_NOTE if shown_run else NO_RUN_NOTE)
            note.setVisible(empty)
            if empty:
                plot.setXRange(0, planned)  # padded: the end ticks are labelled
                plot.setYRange(0, 1)
                note.setPos(planned / 2, 0.5)
            else:
                plot.enableAutoRange(axis="x")
                if plot is self.loss_plot:  # accuracy stays 0 to 1
                    plot.enableAutoRange(axis="y")

    def _on_event(self, event: object) -> None:
        match event:
            case RunStarted():
                self.steps_per_epoch = max(1, event.steps_per_epoch)
                self.status.setText(
                    f"Training on {event.num_train:,} images ({event.device}, "
                    f"{event.num_parameters:,} parameters)"
                )
            case StepEvent():
                self.step_x.append(event.step / self.steps_per_epoch)
                self.step_loss.append(event.loss)
                self.curve_step.setData(self.step_x, self.step_loss)
                self._mark_empty()
                self.progress.setValue(round(1000 * event.step / event.total_steps))
                if not self._cancelling:  # steps still queued after Cancel: no new ETA
                    self.eta.setText(
                        f"ETA {_format_eta(event.eta_s)} · {event.images_per_s:,.0f} img/s"
                    )
                    self.status.setText(
                        f"Epoch {event.epoch}, step {event.step}/{event.total_steps}, "
                        f"loss {event.loss:.3f}"
                    )
            case EpochEvent():
                self.epochs.append(
                    dict(
                        epoch=event.epoch,
                        train_loss=event.train_loss,
                        val_loss=event.val_loss,
                        train_acc=event.train_acc,
                        val_acc=event.val_acc,
                    )
                )
                self._draw_epochs(self.epochs)
                self._update_live_run()
            case ProbeEvent():
                self._add_probe(event)
            case CheckpointEvent():
                self._update_open_buttons()
            case LogEvent():
                self.status.setText(event.message)
            case FinishedEvent():
                self._finished(event)

    def _draw_epochs(self, rows: list[dict]) -> None:
        def series(key: str) -> tuple[list[float], list[float]]:
            pts = [
                (float(r["epoch"]), float(r[key]))
                for r in rows
                if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])
            ]
            return [p[0] for p in pts], [p[1] for p in pts]

        self.curve_train.setData(*series("train_loss"))
        self.curve_val.setData(*series("val_loss"))
        self.curve_train_acc.setData(*series("train_acc"))
        self.curve_val_acc.setData(*series("val_acc"))
        self._mark_empty()

    def _add_probe(self, event: ProbeEvent) -> None:
        image = np.asarray(event.image)
        picture = overlay_on_image(
            image, np.asarray(event.rollout), colormap="inferno", opacity=0.55
        )
        picture = picture.resize((PROBE_SIZE, PROBE_SIZE))
        rgb = np.ascontiguousarray(np.asarray(picture.convert("RGB")))
        qimage = QImage(
            rgb.data, rgb.shape[1], rgb.shape[0], 3 * rgb.shape[1], QImage.Format.Format_RGB888
        ).copy()
        label = QLabel()
        label.setPixmap(QPixmap.fromImage(qimage))
        ok = "✓" if event.predicted == event.label else "✗"
        label.setToolTip(f"epoch {event.epoch}")
        caption = QLabel(f"epoch {event.epoch} {ok}")
        caption.setAlignment(Qt.AlignmentFlag.AlignCenter)
        cell = QWidget()
        v = QVBoxLayout(cell)
        v.setContentsMargins(2, 2, 2, 2)
        v.addWidget(label)
        v.addWidget(caption)
        bar = self.probe_scroll.horizontalScrollBar()
        self._probe_follow = bar.value() >= bar.maximum() - 1
        self.probe_strip.insertWidget(self.probe_strip.count() - 1, cell)
        self.probe_labels.append(cell)

    def _show_newest_probes(self) -> None:
        """Following the run: scroll the strip to its newest epoch with a whole tile at the left
        edge (room is added after the newest when the view is not a whole number of tiles)."""
        if not self._probe_follow or not self.probe_labels:
            return
        bar = self.probe_scroll.horizontalScrollBar()
        right = self.probe_labels[-1].geometry().right() + 1  # the newest tile's right edge
        view = self.probe_scroll.viewport().width()
        first = next(c for c in self.probe_labels if c.x() >= right - view)  # leftmost whole
        left = first.x()
        margins = self.probe_strip.contentsMargins()
        room = max(0, margins.right() + left - bar.maximum())  # scrolled fully: left at left
        if room != margins.right():
            margins.setRight(room)
            self.probe_strip.setContentsMargins(margins)  # the range changes: called again
            return
        bar.setValue(left)

    def _finished(self, event: FinishedEvent) -> None:
        status = event.status
        best = event.best_val_acc
        best_text = f", best validation accuracy {best:.1%}" if best is not None else ""
        self._cancelling = False
        self.eta.setText("")
        if status == "completed":
            self.progress.setValue(1000)
            self.progress.setFormat("Done")
            self.status.setText(f"Done: {event.epochs_done} epochs{best_text}.")
        elif status == "cancelled":
            self.progress.setFormat("Cancelled at %p%")
            self.status.setText(f"Cancelled{best_text}. The last saved checkpoint is kept.")
        else:
            self.progress.setFormat("Failed at %p%")
            self.status.setText(f"Failed: {event.message}")
            self.message.emit(f"Training failed: {event.message}")
        self._update_open_buttons()

    # -- runs list -------------------------------------------------------------------------------
    def refresh_runs(self) -> None:
        current = self.selected_run_dir()
        self.runs.blockSignals(True)
        self.runs.clear()
        for record in list_runs():
            item = QListWidgetItem(_run_text(record.name, record.status, record.metrics))
            item.setData(Qt.ItemDataRole.UserRole, str(record.run_dir))
            self.runs.addItem(item)
            if current is not None and record.run_dir == current:
                self.runs.setCurrentItem(item)
        self.runs.blockSignals(False)
        self._update_open_buttons()

    def _update_live_run(self) -> None:
        """The running run's row follows its epochs as they finish (from the events, no disk)."""
        if self.run_dir is None:
            return
        for i in range(self.runs.count()):
            item = self.runs.item(i)
            if Path(item.data(Qt.ItemDataRole.UserRole)) == self.run_dir:
                item.setText(_run_text(self.run_dir.name, "running", self.epochs))
                return
        self.refresh_runs()  # not listed yet (the list was refreshed before the run began)

    def selected_run_dir(self) -> Path | None:
        item = self.runs.currentItem()
        if item is not None:
            return Path(item.data(Qt.ItemDataRole.UserRole))
        return self.run_dir

    def _on_run_selected(self, item: QListWidgetItem | None, _previous: object = None) -> None:
        if item is None or self.runner.is_running():
            self._update_open_buttons()
            return
        record: RunRecord = read_run(item.data(Qt.ItemDataRole.UserRole))
        self._reset_monitor()
        self._draw_epochs(record.metrics)
        self._show_kept(record.run_dir)
        self._show_run_progress(record)
        self.status.setText(
            f"{record.run_dir.name}: {record.status}"
            + (f" ({record.message})" if record.message else "")
        )
        self._update_open_buttons()

    def _show_kept(self, run_dir: Path) -> None:
        """A past run's per-step loss and probe strip, as they were shown while it ran (from
        its folder's steps.jsonl and probes/)."""
        steps = [
            r
            for r in read_steps(run_dir)
            if all(isinstance(r.get(k), (int, float)) for k in ("step", "loss", "steps_per_epoch"))
        ]
        self.step_x = [r["step"] / max(1, r["steps_per_epoch"]) for r in steps]
        self.step_loss = [float(r["loss"]) for r in steps]
        self.curve_step.setData(self.step_x, self.step_loss)
        self._mark_empty()
        self._probe_follow = True
        for p in read_probes(run_dir):
            self._add_probe(
                ProbeEvent(
                    p["epoch"], p["image"], p["rollout"], p["cls_attention"], p["label"],
                    p["predicted"],
                )
            )  # fmt: skip

    def _show_run_progress(self, record: RunRecord) -> None:
        """The progress bar of a past run: its epochs done of those planned, and how it ended."""
        planned = record.config.epochs if record.config is not None else record.epochs_done
        done = record.status == "completed"
        fraction = 1.0 if done else record.epochs_done / max(1, planned)
        self.progress.setValue(round(1000 * min(1.0, fraction)))
        ended = {"completed": "Done", "cancelled": "Cancelled at %p%", "failed": "Failed at %p%"}
        self.progress.setFormat(ended.get(record.status, "%p%"))

    def _checkpoint(self, which: str) -> Path | None:
        run_dir = self.run_dir if self.runner.is_running() else self.selected_run_dir()
        if run_dir is None:
            return None
        path = run_dir / f"{which}.safetensors"
        return path if path.is_file() else None

    def _update_open_buttons(self) -> None:
        self.open_best.setEnabled(self._checkpoint("best") is not None)
        self.open_last.setEnabled(self._checkpoint("last") is not None)
        both = self._checkpoint("epoch_1") is not None and self._checkpoint("best") is not None
        self.compare_first.setEnabled(both)

    def _compare_first(self) -> None:
        first, best = self._checkpoint("epoch_1"), self._checkpoint("best")
        if first is None or best is None:
            self.message.emit("This run has no epoch 1 and best checkpoints to compare yet.")
            return
        self.compareCheckpoints.emit(first, best)

    def _open(self, which: str) -> None:
        path = self._checkpoint(which)
        if path is None:
            self.message.emit(f"This run has no {which} checkpoint yet.")
            return
        self.openCheckpoint.emit(path)
