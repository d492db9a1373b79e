"""Model ▸ Model and preprocessing: the facts are shown, and a changed preprocessing is used
for the next analysis (here: "fit" keeps a non-square photo whole, so the grid is non-square)."""

from __future__ import annotations

from pathlib import Path

import pyqtgraph as pg
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QPlainTextEdit

from vitviz.checkpoints import load_checkpoint
from vitviz.imaging import Preprocessing
from vitviz.pipeline.analysis import analyze
from vitviz.ui.main_window import MainWindow
from vitviz.ui.settings import AppSettings

WAIT_MS = 30_000


def test_preprocessing_shown_and_overridden(
    qtbot, tmp_path: Path, tiny_ckpt: Path, photo_files
) -> None:
    pg.setConfigOptions(imageAxisOrder="row-major")
    settings = AppSettings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    window = MainWindow(settings)
    qtbot.addWidget(window)
    window.show()
    photo = photo_files["chelsea"]  # 451 × 300
    window.open_paths([tiny_ckpt, photo])
    qtbot.waitUntil(lambda: window.viewer.image is not None, timeout=WAIT_MS)
    assert window.viewer.image.grid == (4, 4)  # the checkpoint's square crop

    window.act_model_info.trigger()
    dialog = window.info_dialog
    facts = dialog.findChild(QPlainTextEdit).toPlainText()
    assert "family: vitviz" in facts and "tiny.safetensors" in facts
    assert dialog.resize_mode.currentData() == "crop"
    dialog.resize_mode.setCurrentIndex(dialog.resize_mode.findData("fit"))
    dialog.mean.setText("0.4")
    dialog.std.setText("x y z")
    dialog._apply()
    assert "Mean and std" in dialog.error.text() and dialog.result() == 0  # refused
    dialog.std.setText("0.25 0.25 0.25")
    dialog._apply()
    qtbot.waitUntil(
        lambda: window.viewer.image is not None and window.viewer.image.grid != (4, 4),
        timeout=WAIT_MS,
    )
    loaded = load_checkpoint(tiny_ckpt)
    prep = Preprocessing.from_dict(
        {**loaded.preprocessing.to_dict(), "resize": "fit", "mean": [0.4] * 3, "std": [0.25] * 3}
    )
    expected = analyze(loaded, photo, preprocessing=prep)
    assert window.viewer.image.grid == expected.grid
    assert expected.grid[0] != expected.grid[1]  # the whole photo, not a square crop
    assert window.viewer.image.top_class == expected.top_class
    assert window.model.preprocessing["resize"] == "fit"
