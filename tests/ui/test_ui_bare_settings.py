"""A bare timm state dict whose settings the weights can't say: before anything is shown the
window asks for them, prefilled with timm's values and marked as guesses; what is left at a
guess is marked "assumed" on the status bar, for that file, until Model ▸ Settings… confirms it."""

from __future__ import annotations

import json
from pathlib import Path

import pyqtgraph as pg
import timm
import torch
from PySide6.QtCore import QSettings
from zoo_helpers import randomize_

from vitviz.ui.main_window import MainWindow
from vitviz.ui.settings import AppSettings

WAIT_MS = 30_000


def _bare_timm(path: Path) -> None:
    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", embed_dim=192, depth=2, patch_size=8,
                              img_size=32, num_heads=3, num_classes=4)  # fmt: skip
    torch.save(randomize_(model, seed=0).state_dict(), path)


def test_guesses_are_asked_marked_and_confirmed(qtbot, tmp_path: Path) -> None:
    path = tmp_path / "fine_tuned.pth"
    _bare_timm(path)
    pg.setConfigOptions(imageAxisOrder="row-major")
    settings = AppSettings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    window = MainWindow(settings)
    qtbot.addWidget(window)
    window.show()
    window.open_paths([path])
    qtbot.waitUntil(lambda: getattr(window, "settings_dialog", None) is not None, timeout=WAIT_MS)
    dialog = window.settings_dialog
    assert window.model is None  # nothing shown before the answer
    # asked (activation) and the conventions that would stand (heads, pooling, image size)
    assert set(dialog.edits) == {"activation", "heads", "global_pool", "image_size"}
    assert json.loads(dialog.edits["activation"].text()) == "gelu"
    assert json.loads(dialog.edits["heads"].text()) == 3
    assert all(dialog.marks[k].text().startswith("guess: ") for k in dialog.edits)
    dialog.edits["global_pool"].setText('"avg"')  # the user knows this one
    assert dialog.marks["global_pool"].text() == "yours"
    assert set(dialog.guessed()) == {"activation", "heads", "image_size"}

    def model_opened():
        return qtbot.waitSignal(
            window.client.resultReady,
            timeout=WAIT_MS,
            check_params_cb=lambda channel, _r: channel == "model",
        )

    with model_opened():
        dialog._check_and_accept()
    assert window.model is not None and window.model.heads == 3
    assert window.assumed_label.isVisible()
    text = window.assumed_label.text()
    assert text.startswith("assumed: ") and "activation" in text and "heads 3" in text, text
    assert "global_pool" not in text  # given: not a guess
    sidecar = tmp_path / "fine_tuned.pth.vitviz.json"
    assert json.loads(sidecar.read_text())["global_pool"] == "avg"

    window.settings_dialog = None  # opened again: the sidecar answers, the marker stays
    with model_opened():
        window.open_paths([path])
    assert window.settings_dialog is None and window.assumed_label.isVisible()

    window.act_model_settings.trigger()  # Model ▸ Settings…
    confirm = window.settings_dialog
    assert confirm is not None and set(confirm.edits) == {"activation", "heads", "image_size"}
    with model_opened():
        confirm._check_and_accept()
    assert not window.assumed_label.isVisible()
    assert settings.guesses_for(path) == {}
    assert json.loads(sidecar.read_text())["activation"] == "gelu"
