"""ModelCodeDialog: open a ViT written in a Python file (its class or factory, arguments, weights).

The dialog builds a ModelCodeSpec and runs nothing: the names offered are read from the file
with ``ast``, and the engine thread imports the file later. Because importing runs the file's
code with the user's rights, the user confirms that they trust the file; the confirmation is
remembered per file path and content hash, so it is asked again when the file changes.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from vitviz.modelcode import (
    ModelCodeError,
    ModelCodeSpec,
    guess_model_name,
    make_spec,
    parse_args_text,
    scan_names,
)
from vitviz.ui import file_dialogs
from vitviz.ui.settings import AppSettings

TRUST_TEXT = "I trust this file: opening it runs its Python code with my rights"
_STATE_FIELDS = (
    "name",
    "args",
    "checkpoint",
    "class_names",
    "image_size",
    "mean",
    "std",
    "patch_size",
    "num_prefix_tokens",
)


def path_key(path: Path) -> str:
    """A settings key part for a file path (QSettings keys can't hold every character)."""
    return hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:20]


def file_hash(path: Path) -> str:
    """sha256 of the file's bytes ('' if it can't be read)."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return ""


def _numbers(text: str, name: str) -> list[float] | None:
    """'0.5, 0.5, 0.5' -> three floats, '0.13' -> one (grayscale); '' -> None."""
    if not text.strip():
        return None
    try:
        values = [float(v) for v in text.replace(";", ",").replace(" ", ",").split(",") if v]
    except ValueError:
        raise ModelCodeError(f"{name} must be three numbers, e.g. 0.5, 0.5, 0.5") from None
    if len(values) not in (1, 3):
        raise ModelCodeError(
            f"{name} must be three numbers (R, G, B) or one (grayscale), got {len(values)}"
        )
    return values


class _PathField(QWidget):
    """A line edit with a Browse… button."""

    def __init__(
        self, title: str, filters: str, placeholder: str, settings: AppSettings, kind: str
    ) -> None:
        super().__init__()
        self.settings, self.kind = settings, kind  # where the file dialog opens
        self.edit = QLineEdit()
        self.edit.setPlaceholderText(placeholder)
        self.button = QPushButton("Browse…")
        self._title, self._filters = title, filters
        self.button.clicked.connect(self._browse)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.edit, 1)
        layout.addWidget(self.button)

    def _browse(self) -> None:
        text = self.edit.text().strip()
        path = file_dialogs.open_file(
            self, self.settings, self.kind, self._title, self._filters, text
        )
        if path:
            self.edit.setText(path)

    def path(self) -> Path | None:
        text = self.edit.text().strip()
        return Path(text).expanduser() if text else None


class ModelCodeDialog(QDialog):
    """Pick a model file, its class or function, JSON arguments, weights and settings."""

    def __init__(self, parent: QWidget | None = None, settings: AppSettings | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Open model code")
        self.setMinimumWidth(560)
        self.settings = settings or AppSettings()
        self._spec: ModelCodeSpec | None = None

        s = self.settings
        python = "Python files (*.py);;All files (*)"
        self.file = _PathField("Model file", python, "model.py", s, "model_code")
        self.path_label = QLabel()
        self.path_label.setWordWrap(True)
        self.name = QComboBox()
        self.name.setEditable(True)
        self.args = QPlainTextEdit()
        self.args.setPlaceholderText('{"image_size": 224, "patch_size": 16, "num_classes": 10}')
        self.args.setMaximumHeight(90)
        self.checkpoint = _PathField(
            "State dict",
            "Weights (*.pth *.pt *.bin *.safetensors *.ckpt);;All files (*)",
            "optional: weights saved with torch.save(model.state_dict(), ...)",
            s,
            "checkpoints",
        )
        self.class_names = _PathField(
            "Class names",
            "Text or JSON (*.txt *.json);;All files (*)",
            "optional: one name a line, or a JSON list",
            s,
            "class_names",
        )
        self.image_size = QSpinBox()
        self.image_size.setRange(0, 4096)
        self.image_size.setSpecialValueText("found from the model")
        self.mean = QLineEdit()
        self.mean.setPlaceholderText("0.5, 0.5, 0.5")
        self.std = QLineEdit()
        self.std.setPlaceholderText("0.5, 0.5, 0.5")
        self.patch_size = QSpinBox()
        self.patch_size.setRange(0, 512)
        self.patch_size.setSpecialValueText("found from the model")
        self.prefix = QSpinBox()
        self.prefix.setRange(-1, 64)
        self.prefix.setSpecialValueText("found from the model")
        self.prefix.setValue(-1)
        self.trust = QCheckBox(TRUST_TEXT)
        self.trust_note = QLabel()
        self.trust_note.setWordWrap(True)
        self.error = QLabel()
        self.error.setWordWrap(True)
        self.error.setStyleSheet("color: #b00020;")
        self.buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Open")
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)

        form = QFormLayout()
        form.addRow("Model file:", self.file)
        form.addRow("", self.path_label)
        form.addRow("Class or function:", self.name)
        form.addRow("Arguments (JSON):", self.args)
        form.addRow("State dict:", self.checkpoint)
        form.addRow("Class names:", self.class_names)
        form.addRow("Image size:", self.image_size)
        form.addRow("Mean:", self.mean)
        form.addRow("Std:", self.std)
        form.addRow("Patch size:", self.patch_size)
        form.addRow("Prefix tokens:", self.prefix)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.trust)
        layout.addWidget(self.trust_note)
        layout.addWidget(self.error)
        layout.addWidget(self.buttons)

        self.file.edit.textChanged.connect(self._file_changed)
        for signal in (
            self.name.currentTextChanged,
            self.args.textChanged,
            self.checkpoint.edit.textChanged,
            self.class_names.edit.textChanged,
            self.mean.textChanged,
            self.std.textChanged,
            self.image_size.valueChanged,
            self.patch_size.valueChanged,
            self.prefix.valueChanged,
            self.trust.toggled,
        ):
            signal.connect(self._validate)
        last = self.settings.get("modelcode/last_file", "", str)
        if last and Path(last).is_file():
            self.file.edit.setText(last)
        self._validate()

    # -- the file -------------------------------------------------------------------------------
    def set_file(self, path: str | Path) -> None:
        self.file.edit.setText(str(path))

    def _file_changed(self) -> None:
        path = self.file.path()
        self.name.blockSignals(True)
        self.name.clear()
        if path is not None and path.is_file():
            names = scan_names(path)
            for info in sorted(names, key=lambda n: not n.is_module):
                label = "class" if info.kind == "class" else "function"
                self.name.addItem(info.name, f"{label}, line {info.line}")
            guess = guess_model_name(names)
            if guess is not None:
                self.name.setCurrentText(guess)
            self.path_label.setText(f"{path.resolve()}")
            self._restore(path)
        else:
            self.path_label.setText("")
        self.name.blockSignals(False)
        self._refresh_trust()
        self._validate()

    def _trust_key(self, path: Path) -> str:
        return f"modelcode/trusted/{path_key(path)}"

    def _refresh_trust(self) -> None:
        path = self.file.path()
        self.trust.blockSignals(True)
        self.trust.setChecked(False)
        note = ""
        if path is not None and path.is_file():
            remembered = self.settings.get(self._trust_key(path), "", str)
            if remembered and remembered == file_hash(path):
                self.trust.setChecked(True)
                note = "You trusted this version of the file before."
            elif remembered:
                note = "The file changed since you last trusted it: check it before opening it."
        self.trust_note.setText(note)
        self.trust.blockSignals(False)

    def is_trusted(self, path: Path) -> bool:
        """Whether the user confirmed trust for this exact version of ``path``."""
        remembered = self.settings.get(self._trust_key(path), "", str)
        return bool(remembered) and remembered == file_hash(path)

    # -- the form <-> settings ----------------------------------------------------------------
    def _state(self) -> dict[str, Any]:
        return {
            "name": self.name.currentText(),
            "args": self.args.toPlainText(),
            "checkpoint": self.checkpoint.edit.text(),
            "class_names": self.class_names.edit.text(),
            "image_size": self.image_size.value(),
            "mean": self.mean.text(),
            "std": self.std.text(),
            "patch_size": self.patch_size.value(),
            "num_prefix_tokens": self.prefix.value(),
        }

    def _restore(self, path: Path) -> None:
        """The values last used with this file, if any."""
        try:
            state = json.loads(self.settings.get(f"modelcode/last/{path_key(path)}", "", str))
        except ValueError:
            return
        if not isinstance(state, dict) or set(state) != set(_STATE_FIELDS):
            return
        if state["name"]:
            self.name.setCurrentText(state["name"])
        self.args.setPlainText(state["args"])
        self.checkpoint.edit.setText(state["checkpoint"])
        self.class_names.edit.setText(state["class_names"])
        self.image_size.setValue(int(state["image_size"]))
        self.mean.setText(state["mean"])
        self.std.setText(state["std"])
        self.patch_size.setValue(int(state["patch_size"]))
        self.prefix.setValue(int(state["num_prefix_tokens"]))

    # -- the spec -------------------------------------------------------------------------------
    def build_spec(self) -> ModelCodeSpec:
        """The spec the form describes; ModelCodeError says what is missing or wrong."""
        path = self.file.path()
        if path is None:
            raise ModelCodeError("Choose the Python file that defines the model.")
        if not path.is_file():
            raise ModelCodeError(f"{path}: no such file.")
        name = self.name.currentText().strip()
        if not name:
            raise ModelCodeError("Give the class or function that builds the model.")
        settings: dict[str, Any] = {}
        if self.image_size.value():
            settings["image_size"] = self.image_size.value()
        for key, edit in (("mean", self.mean), ("std", self.std)):
            values = _numbers(edit.text(), key)
            if values is not None:
                settings[key] = values
        if self.patch_size.value():
            settings["patch_size"] = self.patch_size.value()
        if self.prefix.value() >= 0:
            settings["num_prefix_tokens"] = self.prefix.value()
        names = self.class_names.path()
        if names is not None:
            if not names.is_file():
                raise ModelCodeError(f"class names: {names} is not a file.")
            settings["class_names"] = str(names)
        checkpoint = self.checkpoint.path()
        if checkpoint is not None and not checkpoint.exists():
            raise ModelCodeError(f"state dict: {checkpoint} does not exist.")
        args = parse_args_text(self.args.toPlainText())
        return make_spec(path.resolve(), name, args, checkpoint, settings)

    def _validate(self) -> bool:
        ok_button = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        try:
            self.build_spec()
        except ModelCodeError as exc:
            self.error.setText(str(exc))
            ok_button.setEnabled(False)
            return False
        if not self.trust.isChecked():
            self.error.setText("Confirm that you trust the file: opening it runs its code.")
            ok_button.setEnabled(False)
            return False
        self.error.setText("")
        ok_button.setEnabled(True)
        return True

    def accept(self) -> None:
        if not self._validate():
            return
        spec = self.build_spec()
        self.settings.set(self._trust_key(spec.file), file_hash(spec.file))
        self.settings.set(f"modelcode/last/{path_key(spec.file)}", json.dumps(self._state()))
        self.settings.set("modelcode/last_file", str(spec.file))
        self._spec = spec
        super().accept()

    def spec(self) -> ModelCodeSpec | None:
        """The accepted spec (None until the dialog was accepted)."""
        return self._spec

    @classmethod
    def get_spec(
        cls, parent: QWidget | None = None, settings: AppSettings | None = None
    ) -> ModelCodeSpec | None:
        """Show the dialog modally; the spec, or None when cancelled."""
        dialog = cls(parent, settings)
        accepted = dialog.exec() == QDialog.DialogCode.Accepted
        spec = dialog.spec() if accepted else None
        dialog.deleteLater()
        return spec
