"""The Training tab's "Epoch 1 vs best": a run keeps epoch 1's checkpoint beside its best one,
and the button opens epoch 1's in the viewer and compares it with the best (DESIGN §5)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_ui_training_past_run import SMALL
from test_ui_window import WAIT_MS, new_window

from vitviz.checkpoints import load_checkpoint
from vitviz.training.loop import run_training


def test_epoch_one_opens_beside_the_best(qtbot, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("VITVIZ_DATA_DIR", str(tmp_path / "data"))
    result = run_training(SMALL.replace(name="firstbest"), lambda _e: None)
    first = result.run_dir / "epoch_1.safetensors"
    assert load_checkpoint(first).provenance["epoch"] == 1  # epoch 1's weights, kept
    window = new_window(qtbot, tmp_path / "settings" / "vitviz.ini")
    tab = window.training
    window.tabs.setCurrentWidget(tab)
    tab.refresh_runs()
    tab.runs.setCurrentRow(0)
    assert tab.compare_first.isEnabled()
    tab.compare_first.click()
    qtbot.waitUntil(lambda: window.compare is not None and window.compare.result is not None
                    and not window.client.is_busy(), timeout=WAIT_MS)  # fmt: skip
    assert window.tabs.currentWidget() is window.viewer
    assert window.compare.isVisible()
    shown = window.client._engine.state.loaded
    assert Path(shown.path).name == "epoch_1.safetensors"
    assert window.compare.result.name_b == load_checkpoint(result.run_dir / "best.safetensors").name
