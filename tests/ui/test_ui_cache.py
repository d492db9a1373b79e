""" "Open from cache" in the window: lists what is on disk, opens the chosen checkpoint."""

from __future__ import annotations

from pathlib import Path

import pyqtgraph as pg
import pytest
from PySide6.QtCore import QSettings

from vitviz.blocks import VisionTransformer, ViTConfig
from vitviz.checkpoints import save_checkpoint
from vitviz.ui.main_window import MainWindow
from vitviz.ui.settings import AppSettings


@pytest.fixture
def cached_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake torch hub cache holding one vitviz checkpoint; the HF cache is empty."""
    torch_home = tmp_path / "torch"
    path = torch_home / "hub" / "checkpoints" / "vit_tiny_demo.safetensors"
    model = VisionTransformer(
        ViTConfig(image_size=32, patch_size=8, dim=32, depth=2, heads=2, num_classes=3)
    )
    save_checkpoint(model, path, class_names=["a", "b", "c"])
    monkeypatch.setenv("TORCH_HOME", str(torch_home))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-empty"))
    return path


def test_open_from_cache_lists_and_opens(qtbot, tmp_path: Path, cached_checkpoint: Path) -> None:
    pg.setConfigOptions(imageAxisOrder="row-major")
    settings = AppSettings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    window = MainWindow(settings)
    qtbot.addWidget(window)
    window.show()
    window.act_open_cache.trigger()
    qtbot.waitUntil(lambda: getattr(window, "cache_dialog", None) is not None, timeout=20_000)
    dialog = window.cache_dialog
    assert [Path(e.path) for e in dialog.entries] == [cached_checkpoint]
    assert dialog.table.rowCount() == 1
    assert "vit_tiny_demo" in dialog.table.item(0, 0).text()
    with qtbot.waitSignal(window.client.resultReady, timeout=20_000) as blocker:
        dialog.accept()
    assert blocker.args[0] == "model"
    assert window.model is not None and window.model.path == cached_checkpoint
    assert window.model.num_classes == 3


def test_open_from_cache_with_nothing_cached(
    qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "none"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "none-hf"))
    window = MainWindow(AppSettings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)))
    qtbot.addWidget(window)
    window.act_open_cache.trigger()
    qtbot.waitUntil(lambda: getattr(window, "cache_dialog", None) is not None, timeout=20_000)
    assert window.cache_dialog.entries == []
    assert "No checkpoints" in window.cache_dialog.findChildren(type(window.model_label))[0].text()
