"""Ask for what a checkpoint's weights don't say (heads, image size, ...), then open it again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QVBoxLayout,
    QWidget,
)


class CheckpointSettingsDialog(QDialog):
    """One field per missing setting, pre-filled with an example value (JSON)."""

    def __init__(
        self, path: Path, fields: dict[str, Any], message: str, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"Settings for {path.name}")
        self.path = Path(path)
        self.edits: dict[str, QLineEdit] = {}
        intro = QLabel(message)
        intro.setWordWrap(True)
        form = QFormLayout()
        for name, example in fields.items():
            edit = QLineEdit(json.dumps(example))
            edit.setToolTip('a JSON value, e.g. 4, 224, [224, 224], "gelu", true')
            self.edits[name] = edit
            form.addRow(name, edit)
        self.save = QCheckBox(f"Remember them next to the checkpoint ({self.sidecar.name})")
        self.save.setChecked(True)
        self.error = QLabel("")
        self.error.setStyleSheet("color: #b00020;")
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Open | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.accepted.connect(self._check_and_accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addLayout(form)
        layout.addWidget(self.save)
        layout.addWidget(self.error)
        layout.addWidget(buttons)

    @property
    def sidecar(self) -> Path:
        from vitviz.checkpoints.sidecar import sidecar_path  # torch is loaded by now

        return sidecar_path(self.path)

    def values(self) -> dict[str, Any]:
        """The settings as typed; ValueError naming the field that is not valid JSON."""
        out = {}
        for name, edit in self.edits.items():
            text = edit.text().strip()
            try:
                out[name] = json.loads(text)
            except ValueError as exc:
                raise ValueError(f"{name}: {text!r} is not a JSON value") from exc
        return out

    def _check_and_accept(self) -> None:
        try:
            values = self.values()
        except ValueError as exc:
            self.error.setText(str(exc))
            return
        if self.save.isChecked():
            try:
                existing = json.loads(self.sidecar.read_text()) if self.sidecar.is_file() else {}
                if not isinstance(existing, dict):
                    existing = {}
                self.sidecar.write_text(json.dumps({**existing, **values}, indent=2) + "\n")
            except (OSError, ValueError) as exc:
                self.error.setText(f"Could not write {self.sidecar.name}: {exc}")
                return
        self.accept()
