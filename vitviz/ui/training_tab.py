"""The Training tab: configure a short ViT run, start it, watch curves and attention form, keep it.

The run is a child process (vitviz.training via workers.training.TrainingRunner); this tab only
turns settings into a TrainConfig and events into pictures.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QImage, QPixmap
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
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
from vitviz.training import (
    PRESETS,
    RunRecord,
    TrainConfig,
    TrainingConfigError,
    list_runs,
    read_run,
    validate_training_config,
)
from vitviz.workers.training import TrainingRunner

DATASETS = (
    ("shapes", "Synthetic shapes (built in)"),
    ("folder", "Image folder (one per class)"),
    ("cifar10", "CIFAR-10 batches folder"),
    ("random", "Random data (smoke test)"),
)
PRESET_LABELS = {
    "tutorial": "Tutorial CIFAR-10 ViT (32 px, patch 8)",
    "shapes": "Shapes ViT (64 px, patch 8)",
}
PROBE_SIZE = 96


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


def _format_eta(seconds: float) -> str:
    if not math.isfinite(seconds) or seconds < 0:
        return "–"
    m, s = divmod(round(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class TrainingTab(QWidget):
    openCheckpoint = Signal(object)  # Path of a checkpoint to open in the viewer
    message = Signal(str)  # short user messages for the window's message bar

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.runner = TrainingRunner(self)
        self.run_dir: Path | None = None
        self.step_x: list[float] = []
        self.step_loss: list[float] = []
        self.epochs: list[dict[str, float]] = []
        self.steps_per_epoch = 1
        self._build_settings()
        self._build_monitor()
        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(self.settings_scroll)
        splitter.addWidget(self.monitor)
        splitter.setSizes([360, 1000])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(splitter)
        self.runner.eventReceived.connect(self._on_event)
        self.runner.runningChanged.connect(self._on_running)
        self.apply_preset("tutorial")
        self.refresh_runs()

    # -- building -------------------------------------------------------------------------------
    def _build_settings(self) -> None:
        self.preset = QComboBox()
        for key in PRESETS:
            self.preset.addItem(PRESET_LABELS.get(key, key), key)
        self.preset.activated.connect(lambda _i: self.apply_preset(self.preset.currentData()))
        self.dataset_kind = QComboBox()
        for key, label in DATASETS:
            self.dataset_kind.addItem(label, key)
        self.dataset_path = QLineEdit()
        self.dataset_path.setPlaceholderText("folder (for image folder / CIFAR-10)")
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        path_row = QHBoxLayout()
        path_row.addWidget(self.dataset_path, 1)
        path_row.addWidget(browse)
        self.dataset_kind.currentIndexChanged.connect(self._on_dataset_kind)

        self.image_size = _spin(8, 1024, 32, 8)
        self.patch_size = _spin(1, 64, 8)
        self.dim = _spin(8, 2048, 64, 8)
        self.depth = _spin(1, 48, 4)
        self.heads = _spin(1, 32, 4)
        self.mlp_ratio = _dspin(0.5, 8.0, 4.0, 0.5, 1)
        self.pos_embed = QComboBox()
        self.pos_embed.addItems(["learned", "sincos", "sincos2d"])
        self.drop_path = _dspin(0.0, 0.9, 0.1, 0.05, 2)
        self.train_size = _spin(0, 10_000_000, 0, 1000, "default")
        self.val_size = _spin(0, 1_000_000, 0, 100, "default")
        self.seed = _spin(0, 2**31 - 1, 0)
        self.epochs_box = _spin(1, 10_000, 10)
        self.batch_size = _spin(1, 8192, 64, 16)
        self.lr = _dspin(1e-6, 1.0, 1e-3, 1e-4, 6)
        self.weight_decay = _dspin(0.0, 1.0, 0.05, 0.01, 3)
        self.warmup = _dspin(0.0, 100.0, 1.0, 0.5, 1)
        self.label_smoothing = _dspin(0.0, 0.5, 0.1, 0.05, 2)
        self.grad_clip = _dspin(0.0, 100.0, 1.0, 0.5, 2)
        self.device = QComboBox()
        self.device.addItems(["auto", "cpu", "cuda", "mps"])

        data = QGroupBox("Data")
        f = QFormLayout(data)
        f.addRow("Preset", self.preset)
        f.addRow("Dataset", self.dataset_kind)
        f.addRow("Folder", path_row)
        f.addRow("Training images", self.train_size)
        f.addRow("Validation images", self.val_size)
        f.addRow("Seed", self.seed)
        model = QGroupBox("Model")
        f = QFormLayout(model)
        for label, w in (
            ("Image size", self.image_size),
            ("Patch size", self.patch_size),
            ("Width (dim)", self.dim),
            ("Depth", self.depth),
            ("Heads", self.heads),
            ("MLP ratio", self.mlp_ratio),
            ("Position embedding", self.pos_embed),
            ("Stochastic depth", self.drop_path),
        ):
            f.addRow(label, w)
        optim = QGroupBox("Optimiser (AdamW, warmup + cosine)")
        f = QFormLayout(optim)
        for label, w in (
            ("Epochs", self.epochs_box),
            ("Batch size", self.batch_size),
            ("Learning rate", self.lr),
            ("Weight decay", self.weight_decay),
            ("Warmup epochs", self.warmup),
            ("Label smoothing", self.label_smoothing),
            ("Gradient clip", self.grad_clip),
            ("Device", self.device),
        ):
            f.addRow(label, w)
        self.start_button = QPushButton("Start training")
        self.start_button.setDefault(True)
        self.start_button.clicked.connect(self.start)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.cancel)
        self.problems = QLabel("")
        self.problems.setWordWrap(True)
        self.problems.setStyleSheet("color: #b00020;")
        buttons = QHBoxLayout()
        buttons.addWidget(self.start_button)
        buttons.addWidget(self.cancel_button)
        panel = QWidget()
        v = QVBoxLayout(panel)
        for w in (data, model, optim):
            v.addWidget(w)
        v.addLayout(buttons)
        v.addWidget(self.problems)
        v.addStretch(1)
        self.settings_scroll = QScrollArea()
        self.settings_scroll.setWidgetResizable(True)
        self.settings_scroll.setWidget(panel)
        self._on_dataset_kind()

    def _build_monitor(self) -> None:
        self.status = QLabel("No run yet. Pick settings and press Start training.")
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setValue(0)
        self.eta = QLabel("")
        top = QHBoxLayout()
        top.addWidget(self.status, 1)
        top.addWidget(self.progress, 1)
        top.addWidget(self.eta)
        self.loss_plot = pg.PlotWidget(title="Loss")
        self.acc_plot = pg.PlotWidget(title="Accuracy")
        for plot, label in ((self.loss_plot, "loss"), (self.acc_plot, "accuracy")):
            plot.setBackground("#fafafa")
            plot.setAcceptDrops(False)
            plot.showGrid(x=True, y=True, alpha=0.2)
            plot.setLabel("bottom", "epoch")
            plot.setLabel("left", label)
            plot.addLegend(offset=(-10, 10))
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
        self.probe_scroll.setFixedHeight(PROBE_SIZE + 56)
        self.probe_labels: list[QLabel] = []

        self.open_best = QPushButton("Open best in viewer")
        self.open_last = QPushButton("Open latest in viewer")
        self.open_best.clicked.connect(lambda: self._open("best"))
        self.open_last.clicked.connect(lambda: self._open("last"))
        self.runs = QListWidget()
        self.runs.setMaximumHeight(140)
        self.runs.currentItemChanged.connect(self._on_run_selected)
        refresh = QPushButton("Refresh")
        refresh.clicked.connect(self.refresh_runs)
        run_buttons = QHBoxLayout()
        run_buttons.addWidget(QLabel("<b>Runs</b>"))
        run_buttons.addStretch(1)
        run_buttons.addWidget(refresh)
        run_buttons.addWidget(self.open_best)
        run_buttons.addWidget(self.open_last)

        self.monitor = QWidget()
        v = QVBoxLayout(self.monitor)
        v.addLayout(top)
        v.addWidget(curves, 1)
        v.addWidget(QLabel("<b>Attention on a fixed probe image</b> (rollout, one per epoch)"))
        v.addWidget(self.probe_scroll)
        v.addLayout(run_buttons)
        v.addWidget(self.runs)
        self._update_open_buttons()

    # -- settings <-> config ------------------------------------------------------------------
    def apply_preset(self, name: str) -> None:
        cfg = TrainConfig(**PRESETS[name])
        self.preset.setCurrentIndex(max(0, self.preset.findData(name)))
        self.set_config(cfg)

    def set_config(self, cfg: TrainConfig) -> None:
        kind, _, path = cfg.dataset.partition(":")
        self.dataset_kind.setCurrentIndex(max(0, self.dataset_kind.findData(kind)))
        self.dataset_path.setText(path)
        for w, v in (
            (self.image_size, cfg.image_size),
            (self.patch_size, cfg.patch_size),
            (self.dim, cfg.dim),
            (self.depth, cfg.depth),
            (self.heads, cfg.heads),
            (self.train_size, cfg.train_size or 0),
            (self.val_size, cfg.val_size or 0),
            (self.seed, cfg.seed),
            (self.epochs_box, cfg.epochs),
            (self.batch_size, cfg.batch_size),
        ):
            w.setValue(int(v))
        for w, v in (
            (self.mlp_ratio, cfg.mlp_ratio),
            (self.drop_path, cfg.drop_path_rate),
            (self.lr, cfg.lr),
            (self.weight_decay, cfg.weight_decay),
            (self.warmup, cfg.warmup_epochs),
            (self.label_smoothing, cfg.label_smoothing),
            (self.grad_clip, cfg.grad_clip),
        ):
            w.setValue(float(v))
        self.pos_embed.setCurrentText(cfg.pos_embed)
        self.device.setCurrentText(
            cfg.device if cfg.device in ("auto", "cpu", "cuda", "mps") else "auto"
        )

    def config(self) -> TrainConfig:
        kind = self.dataset_kind.currentData()
        path = self.dataset_path.text().strip()
        dataset = f"{kind}:{path}" if kind in ("folder", "cifar10") else kind
        return TrainConfig(
            dataset=dataset,
            image_size=self.image_size.value(),
            patch_size=self.patch_size.value(),
            dim=self.dim.value(),
            depth=self.depth.value(),
            heads=self.heads.value(),
            mlp_ratio=self.mlp_ratio.value(),
            pos_embed=self.pos_embed.currentText(),
            drop_path_rate=self.drop_path.value(),
            train_size=self.train_size.value() or None,
            val_size=self.val_size.value() or None,
            seed=self.seed.value(),
            epochs=self.epochs_box.value(),
            batch_size=self.batch_size.value(),
            lr=self.lr.value(),
            weight_decay=self.weight_decay.value(),
            warmup_epochs=self.warmup.value(),
            label_smoothing=self.label_smoothing.value(),
            grad_clip=self.grad_clip.value(),
            device=self.device.currentText(),
            command="vitviz window: Training tab",
        )

    def _on_dataset_kind(self) -> None:
        needs_path = self.dataset_kind.currentData() in ("folder", "cifar10")
        self.dataset_path.setEnabled(needs_path)

    def _browse(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Dataset folder", self.dataset_path.text())
        if folder:
            self.dataset_path.setText(folder)

    # -- run control -----------------------------------------------------------------------------
    def start(self) -> bool:
        """Check the settings, then start the run; refuse with the reasons before anything runs."""
        try:
            cfg = self.config()
        except (TypeError, ValueError) as exc:
            self.problems.setText(str(exc))
            return False
        problems = validate_training_config(cfg)
        if problems:
            self.problems.setText("Can't start: " + " ".join(problems))
            return False
        self.problems.setText("")
        self._reset_monitor()
        try:
            handle = self.runner.start(cfg)
        except TrainingConfigError as exc:
            self.problems.setText(f"Can't start: {exc}")
            return False
        self.run_dir = handle.run_dir
        self.status.setText(f"Starting… ({handle.run_dir.name})")
        return True

    def cancel(self) -> None:
        self.runner.cancel()
        self.status.setText("Cancelling…")

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
        self.progress.setValue(0)
        self.eta.setText("")

    def _on_event(self, event: object) -> None:
        kind = getattr(event, "kind", "")
        if kind == "started":
            self.steps_per_epoch = max(1, event.steps_per_epoch)  # type: ignore[attr-defined]
            self.status.setText(
                f"Training on {event.num_train:,} images ({event.device}, "  # type: ignore[attr-defined]
                f"{event.num_parameters:,} parameters)"
            )  # type: ignore[attr-defined]
        elif kind == "step":
            self.step_x.append(event.step / self.steps_per_epoch)  # type: ignore[attr-defined]
            self.step_loss.append(event.loss)  # type: ignore[attr-defined]
            self.curve_step.setData(self.step_x, self.step_loss)
            self.progress.setValue(round(1000 * event.step / event.total_steps))  # type: ignore[attr-defined]
            self.eta.setText(
                f"ETA {_format_eta(event.eta_s)} · "  # type: ignore[attr-defined]
                f"{event.images_per_s:,.0f} img/s"
            )  # type: ignore[attr-defined]
            self.status.setText(
                f"Epoch {event.epoch}, step {event.step}/{event.total_steps}, "  # type: ignore[attr-defined]
                f"loss {event.loss:.3f}"
            )  # type: ignore[attr-defined]
        elif kind == "epoch":
            self.epochs.append(
                dict(
                    epoch=event.epoch,
                    train_loss=event.train_loss,  # type: ignore[attr-defined]
                    val_loss=event.val_loss,
                    train_acc=event.train_acc,  # type: ignore[attr-defined]
                    val_acc=event.val_acc,
                )
            )  # type: ignore[attr-defined]
            self._draw_epochs(self.epochs)
        elif kind == "probe":
            self._add_probe(event)
        elif kind == "checkpoint":
            self._update_open_buttons()
        elif kind == "log":
            self.status.setText(event.message)  # type: ignore[attr-defined]
        elif kind == "finished":
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

    def _add_probe(self, event: object) -> None:
        image = np.asarray(event.image)  # type: ignore[attr-defined]
        picture = overlay_on_image(
            image,
            np.asarray(event.rollout),
            colormap="inferno",  # type: ignore[attr-defined]
            opacity=0.55,
        )
        picture = picture.resize((PROBE_SIZE, PROBE_SIZE))
        rgb = np.ascontiguousarray(np.asarray(picture.convert("RGB")))
        qimage = QImage(
            rgb.data, rgb.shape[1], rgb.shape[0], 3 * rgb.shape[1], QImage.Format.Format_RGB888
        ).copy()
        label = QLabel()
        label.setPixmap(QPixmap.fromImage(qimage))
        ok = "✓" if event.predicted == event.label else "✗"  # type: ignore[attr-defined]
        label.setToolTip(f"epoch {event.epoch}")  # type: ignore[attr-defined]
        caption = QLabel(f"epoch {event.epoch} {ok}")  # type: ignore[attr-defined]
        caption.setAlignment(Qt.AlignmentFlag.AlignCenter)
        cell = QWidget()
        v = QVBoxLayout(cell)
        v.setContentsMargins(2, 2, 2, 2)
        v.addWidget(label)
        v.addWidget(caption)
        self.probe_strip.insertWidget(self.probe_strip.count() - 1, cell)
        self.probe_labels.append(cell)  # type: ignore[arg-type]

    def _finished(self, event: object) -> None:
        status = event.status  # type: ignore[attr-defined]
        best = event.best_val_acc  # type: ignore[attr-defined]
        best_text = f", best validation accuracy {best:.1%}" if best is not None else ""
        if status == "completed":
            self.progress.setValue(1000)
            self.status.setText(f"Done: {event.epochs_done} epochs{best_text}.")  # type: ignore[attr-defined]
        elif status == "cancelled":
            self.status.setText(f"Cancelled{best_text}. The last saved checkpoint is kept.")
        else:
            self.status.setText(f"Failed: {event.message}")  # type: ignore[attr-defined]
            self.message.emit(f"Training failed: {event.message}")  # type: ignore[attr-defined]
        self._update_open_buttons()

    # -- runs list -------------------------------------------------------------------------------
    def refresh_runs(self) -> None:
        current = self.selected_run_dir()
        self.runs.blockSignals(True)
        self.runs.clear()
        for record in list_runs():
            acc = f"{record.best_val_acc:.1%}" if record.best_val_acc is not None else "–"
            item = QListWidgetItem(
                f"{record.run_dir.name} · {record.status} · "
                f"{record.epochs_done} epochs · best {acc}"
            )
            item.setData(Qt.ItemDataRole.UserRole, str(record.run_dir))
            self.runs.addItem(item)
            if current is not None and record.run_dir == current:
                self.runs.setCurrentItem(item)
        self.runs.blockSignals(False)
        self._update_open_buttons()

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
        self.status.setText(
            f"{record.run_dir.name}: {record.status}"
            + (f" ({record.message})" if record.message else "")
        )
        self._update_open_buttons()

    def _checkpoint(self, which: str) -> Path | None:
        run_dir = self.run_dir if self.runner.is_running() else self.selected_run_dir()
        if run_dir is None:
            return None
        path = run_dir / f"{which}.safetensors"
        return path if path.is_file() else None

    def _update_open_buttons(self) -> None:
        self.open_best.setEnabled(self._checkpoint("best") is not None)
        self.open_last.setEnabled(self._checkpoint("last") is not None)

    def _open(self, which: str) -> None:
        path = self._checkpoint(which)
        if path is None:
            self.message.emit(f"This run has no {which} checkpoint yet.")
            return
        self.openCheckpoint.emit(path)
