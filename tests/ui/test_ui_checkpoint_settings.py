"""A checkpoint whose weights don't say everything: the window asks for exactly the missing
settings, opens it with them, and remembers them next to the file."""

from __future__ import annotations

import json
from pathlib import Path

import pyqtgraph as pg
import torch
from PySide6.QtCore import QSettings
from test_zoo_tutorial import LucidViT
from zoo_helpers import randomize_

from vitviz.ui.main_window import MainWindow
from vitviz.ui.settings import AppSettings

WAIT_MS = 30_000


def test_missing_settings_are_asked_for_and_remembered(qtbot, tmp_path: Path) -> None:
    torch.manual_seed(0)
    path = tmp_path / "vit.pt"
    torch.save(randomize_(LucidViT(4, 8, "cls"), seed=0).state_dict(), path)
    pg.setConfigOptions(imageAxisOrder="row-major")
    window = MainWindow(AppSettings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)))
    qtbot.addWidget(window)
    window.show()
    window.open_paths([path])
    qtbot.waitUntil(lambda: getattr(window, "settings_dialog", None) is not None, timeout=WAIT_MS)
    dialog = window.settings_dialog
    assert set(dialog.edits) == {"heads", "image_size"}  # exactly what the weights lack
    assert "vit.pt" in window.message_bar.text() and window.model is None

    dialog.edits["heads"].setText("not json")
    dialog._check_and_accept()
    assert "heads" in dialog.error.text() and dialog.result() == 0  # refused, still open

    dialog.edits["heads"].setText("4")
    dialog.edits["image_size"].setText("[32, 48]")
    with qtbot.waitSignal(
        window.client.resultReady,
        timeout=WAIT_MS,
        check_params_cb=lambda channel, _r: channel == "model",
    ):
        dialog._check_and_accept()
    assert window.model is not None and window.model.heads == 4
    assert window.model.image_size == (32, 48)
    sidecar = tmp_path / "vit.pt.vitviz.json"
    assert json.loads(sidecar.read_text()) == {"heads": 4, "image_size": [32, 48]}

    window.settings_dialog = None  # the next open needs no dialog: the sidecar answers
    with qtbot.waitSignal(
        window.client.resultReady,
        timeout=WAIT_MS,
        check_params_cb=lambda channel, _r: channel == "model",
    ):
        window.open_paths([path])
    assert window.settings_dialog is None
