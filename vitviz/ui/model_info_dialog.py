"""Model ▸ Model and preprocessing: what the checkpoint is, and how images are prepared for it
(shown, and overridable)."""

from __future__ import annotations

import json
from typing import Any

from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from vitviz.workers.messages import ModelSummary

RESIZE_MODES = (
    ("crop", "resize the short side, centre crop (torchvision / timm)"),
    ("fit", "keep the whole image and its aspect ratio (non-square grid)"),
    ("squash", "resize straight to the size (Hugging Face ViT)"),
)
INTERPOLATIONS = ("bicubic", "bilinear", "nearest", "lanczos")


def _per_channel(edit: QLineEdit, channels: int) -> list[float]:
    values = [float(v) for v in edit.text().replace(",", " ").split()]
    if len(values) == 1:
        values *= channels
    if len(values) != channels:
        raise ValueError(
            "give three numbers (R G B) or one"
            if channels == 3
            else f"give {channels} numbers (one per channel) or one"
        )
    return values


def _size(size: Any) -> str:
    return "×".join(str(int(v)) for v in size)


def architecture_lines(summary: ModelSummary) -> list[str]:
    """The facts about the model's shape, as its kind words them (a ViT's layers, heads and
    width; a Swin's stages: blocks, width, heads and window of each), patch and sizes."""
    if summary.architecture:
        return list(summary.architecture)
    return [
        f"layers × heads: {summary.depth} × {summary.heads}, patch {summary.patch_size}, "
        f"trained at {_size(summary.image_size)}",
        f"classes: {summary.num_classes}; prefix tokens: {summary.num_prefix_tokens}",
    ]


class ModelInfoDialog(QDialog):
    """Read-only facts about the model plus an editable preprocessing form."""

    def __init__(self, summary: ModelSummary, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"Model — {summary.name}")
        self.resize(620, 560)
        facts = QPlainTextEdit()
        facts.setReadOnly(True)
        lines = [
            f"file: {summary.path}",
            f"family: {summary.family}",
            *architecture_lines(summary),
            f"device: {summary.device}",
        ]
        lines += [f"note: {n}" for n in summary.notes]
        if summary.provenance:
            lines.append("provenance: " + json.dumps(summary.provenance, indent=1, default=str))
        facts.setPlainText("\n".join(lines))

        prep = summary.preprocessing
        self.channels = int(prep.get("channels", 3))
        self.resize_mode = QComboBox()
        for key, text in RESIZE_MODES:
            self.resize_mode.addItem(f"{key}: {text}", key)
        self.resize_mode.setCurrentIndex(max(0, self.resize_mode.findData(prep["resize"])))
        self.height_box, self.width_box = QSpinBox(), QSpinBox()
        for box, value in zip((self.height_box, self.width_box), prep["image_size"], strict=True):
            box.setRange(1, 4096)
            box.setValue(int(value))
        size_row = QHBoxLayout()
        size_row.addWidget(self.height_box)
        size_row.addWidget(QLabel("×"))
        size_row.addWidget(self.width_box)
        self.crop_pct = QDoubleSpinBox()
        self.crop_pct.setRange(0.05, 1.0)
        self.crop_pct.setDecimals(3)
        self.crop_pct.setSingleStep(0.025)
        self.crop_pct.setValue(float(prep["crop_pct"]))
        self.mean = QLineEdit(" ".join(f"{v:g}" for v in prep["mean"]))
        self.std = QLineEdit(" ".join(f"{v:g}" for v in prep["std"]))
        self.interpolation = QComboBox()
        self.interpolation.addItems(list(INTERPOLATIONS))
        self.interpolation.setCurrentText(prep["interpolation"])
        self.error = QLabel("")
        self.error.setStyleSheet("color: #b00020;")
        box = QGroupBox("Preprocessing (applied to the next analysis)")
        form = QFormLayout(box)
        form.addRow("Resize", self.resize_mode)
        form.addRow("Input size (H × W)", size_row)
        form.addRow("Crop fraction", self.crop_pct)
        form.addRow("Mean", self.mean)
        form.addRow("Std", self.std)
        form.addRow("Interpolation", self.interpolation)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Apply | QDialogButtonBox.StandardButton.Close
        )
        buttons.button(QDialogButtonBox.StandardButton.Apply).clicked.connect(self._apply)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(facts, 1)
        layout.addWidget(box)
        layout.addWidget(self.error)
        layout.addWidget(buttons)

    def preprocessing(self) -> dict[str, Any]:
        """The form as a Preprocessing dict; ValueError for mean / std that are not numbers."""
        return {
            "image_size": [self.height_box.value(), self.width_box.value()],
            "resize": self.resize_mode.currentData(),
            "crop_pct": self.crop_pct.value(),
            "mean": _per_channel(self.mean, self.channels),
            "std": _per_channel(self.std, self.channels),
            "interpolation": self.interpolation.currentText(),
            "channels": self.channels,
        }

    def _apply(self) -> None:
        try:
            self.preprocessing()
        except ValueError as exc:
            self.error.setText(f"Mean and std: {exc}")
            return
        self.error.setText("")
        self.accept()
