"""File dialogs open in the folder used last for their kind of file (remembered across sessions),
a kind never used in the folder used last for any, at first the home folder, never the working
directory; Qt's own dialog shows file names in full. Driven as a user: the real dialog, answered
while it is open."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
from PIL import Image
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QFileDialog, QLineEdit, QTreeView
from test_ui_window import drop, new_window

from vitviz.ui.main_window import MainWindow

LONG_NAME = "a photo with a rather long descriptive name taken in 2026 at dusk.png"


def answer(dialog_action: Callable[[], None], choose: Path | None) -> dict:
    """Run ``dialog_action`` (it opens a modal file dialog), note where the dialog opened and how
    wide its columns are, then choose ``choose`` (None: cancel)."""
    seen: dict = {}

    def respond() -> None:
        dialog = QApplication.activeModalWidget()
        if not isinstance(dialog, QFileDialog):
            QTimer.singleShot(10, respond)
            return
        tree = dialog.findChild(QTreeView)
        seen["folder"] = Path(dialog.directory().absolutePath())
        seen["selected"] = [Path(p).name for p in dialog.selectedFiles()]
        QApplication.processEvents()  # the folder's files listed
        header = tree.header()
        seen["columns"] = [header.sectionSize(i) for i in range(header.count())]
        seen["name_width"] = tree.fontMetrics().horizontalAdvance(LONG_NAME)
        seen["hints"] = [header.sectionSizeHint(i) for i in range(1, header.count())]
        if choose is None:
            dialog.reject()
        else:
            name = dialog.findChild(QLineEdit, "fileNameEdit")  # typed, as a user would
            name.setText(str(choose))
            dialog.accept()

    QTimer.singleShot(0, respond)
    dialog_action()
    return seen


def test_dialogs_open_where_each_kind_was_used_last(
    qtbot, tmp_path: Path, tiny_ckpt: Path, monkeypatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    photos, models, other = tmp_path / "photos", tmp_path / "models", tmp_path / "elsewhere"
    for folder in (photos, models, other):
        folder.mkdir()
    photo = photos / LONG_NAME
    Image.fromarray(np.full((40, 48, 3), 120, np.uint8)).save(photo)
    model = models / "tiny.safetensors"
    model.write_bytes(tiny_ckpt.read_bytes())
    settings = tmp_path / "settings.ini"
    window: MainWindow = new_window(qtbot, settings)
    assert Path.cwd() != home

    first = answer(window.open_image_dialog, None)  # nothing remembered yet: home
    assert first["folder"] == home
    seen = answer(window.open_image_dialog, photo)
    assert seen["folder"] == home
    assert window._requested_source == str(photo)
    # Qt's own dialog: the name column holds the long name, the others their contents
    name, *others = seen["columns"]
    assert name >= seen["name_width"], seen
    assert all(width >= hint for width, hint in zip(others, seen["hints"], strict=True)), seen

    # a kind never used opens where the last file was chosen; each kind keeps its own folder
    assert answer(window.open_checkpoint_dialog, model)["folder"] == photos
    qtbot.waitUntil(lambda: window.model is not None and window.model.name == model.name)
    assert answer(window.open_image_dialog, None)["folder"] == photos
    assert answer(window.open_checkpoint_dialog, None)["folder"] == models
    folder_dialog = answer(window.open_folder_dialog, None)
    assert folder_dialog["folder"] == photos
    # a checkpoint dropped from another folder: the checkpoint dialog opens there next
    other_model = other / "other.safetensors"
    other_model.write_bytes(tiny_ckpt.read_bytes())
    drop(window, [other_model])
    assert answer(window.open_checkpoint_dialog, None)["folder"] == other
    assert answer(window.open_image_dialog, None)["folder"] == photos
    qtbot.waitUntil(lambda: window.viewer.image is not None and not window.client.is_busy())
    # export proposes the image's name in the folder used last (no export yet)
    export = answer(lambda: window.export_dialog("view"), None)
    assert export["folder"] == other and export["selected"][0].endswith("_map.png")
    window.close()

    # the next session remembers
    again: MainWindow = new_window(qtbot, settings)
    assert answer(again.open_image_dialog, None)["folder"] == photos
    assert answer(again.open_checkpoint_dialog, None)["folder"] == other
    panel = again.viewer.stats_panel
    assert answer(panel._choose_folder, None)["folder"] == photos
    again.training.dataset_path.setText("")
    assert answer(again.training._browse, None)["folder"] == other  # the last folder used
