"""Ask for what a checkpoint's weights don't say (heads, activation, image size, ...), then open it
again; or confirm the settings it was opened with on a guess (Model ▸ Settings…)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QGridLayout,
    QLabel,
    QLineEdit,
    QVBoxLayout,
    QWidget,
)

GUESS_STYLE = "color: #8a5a00; font-style: italic;"
YOURS_STYLE = "color: #1b6e20;"


class CheckpointSettingsDialog(QDialog):
    """One field per setting (a JSON value), each prefilled; ``guesses`` (setting -> where the
    prefilled value comes from) are marked "guess" until edited. ``confirm``: the model is open
    already and these are the settings it was opened with (the button says Confirm)."""

    def __init__(
        self,
        path: Path,
        fields: dict[str, Any],
        message: str,
        parent: QWidget | None = None,
        guesses: dict[str, str] | None = None,
        confirm: bool = False,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"Settings for {path.name}")
        self.setMinimumWidth(640)
        self.path = Path(path)
        self.guesses = dict(guesses or {})
        self.edits: dict[str, QLineEdit] = {}
        self.marks: dict[str, QLabel] = {}
        self._initial = {name: json.dumps(value) for name, value in fields.items()}
        intro = QLabel(message)
        intro.setWordWrap(True)
        grid = QGridLayout()
        grid.setColumnStretch(1, 1)
        for row, name in enumerate(fields):
            edit = QLineEdit(self._initial[name])
            edit.setToolTip('a JSON value, e.g. 4, 224, [224, 224], "gelu", true')
            mark = QLabel()
            mark.setWordWrap(True)
            self.edits[name], self.marks[name] = edit, mark
            edit.textChanged.connect(lambda _text, n=name: self._mark(n))
            grid.addWidget(QLabel(name), row, 0)
            grid.addWidget(edit, row, 1)
            grid.addWidget(mark, row, 2)
            self._mark(name)
        self.save = QCheckBox(f"Remember them next to the checkpoint ({self.sidecar.name})")
        self.save.setChecked(True)
        self.error = QLabel("")
        self.error.setStyleSheet("color: #b00020;")
        ok = QDialogButtonBox.StandardButton.Ok if confirm else QDialogButtonBox.StandardButton.Open
        buttons = QDialogButtonBox(ok | QDialogButtonBox.StandardButton.Cancel)
        if confirm:
            buttons.button(ok).setText("Confirm")
        buttons.accepted.connect(self._check_and_accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addLayout(grid)
        layout.addWidget(self.save)
        layout.addWidget(self.error)
        layout.addWidget(buttons)

    @property
    def sidecar(self) -> Path:
        from vitviz.checkpoints.sidecar import sidecar_path  # torch is loaded by now

        return sidecar_path(self.path)

    def _mark(self, name: str) -> None:
        """A guess until its value is changed; then the user's."""
        mark = self.marks[name]
        if name in self.guesses and self.edits[name].text().strip() == self._initial[name]:
            mark.setText(f"guess: {self.guesses[name]}")
            mark.setStyleSheet(GUESS_STYLE)
        elif name in self.guesses:
            mark.setText("yours")
            mark.setStyleSheet(YOURS_STYLE)
        else:
            mark.setText("")

    def guessed(self) -> list[str]:
        """The settings still at their guessed value (the window marks them as assumed)."""
        return [n for n in self.guesses if n in self.edits and self.marks[n].text() != "yours"]

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
