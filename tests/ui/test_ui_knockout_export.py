"""The head grid exported with heads knocked out says which, as the window's map title does
(DESIGN §5, "Interventions"; DESIGN §6): its title lines name the heads and the ablation, the
npz keeps them, and after "Restore all" neither says anything of them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import random_vit
from test_ui_window import WAIT_MS, new_window, settled, wait_shown

from vitviz.checkpoints import save_checkpoint
from vitviz.pipeline import export as ex
from vitviz.ui.main_window import MainWindow


@pytest.fixture
def window(qtbot, tmp_path: Path) -> MainWindow:
    w = new_window(qtbot, tmp_path / "settings.ini")
    yield w


def _export(qtbot, window: MainWindow, path: Path, what: str) -> None:
    with qtbot.waitSignal(
        window.client.resultReady, timeout=WAIT_MS, check_params_cb=lambda ch, _r: ch == "export"
    ):
        window.export_to(path, what)
    assert path.name in window.message_bar.text()


def test_exported_head_grid_names_the_knocked_out_heads(
    qtbot, window, tmp_path, photo_files, monkeypatch
) -> None:
    names = [f"k{i}" for i in range(5)]
    model = random_vit(image_size=64, patch_size=8, dim=48, depth=3, heads=3, seed=2)
    ckpt = save_checkpoint(model, tmp_path / "a.safetensors", class_names=names)
    photo = photo_files["chelsea"]
    window.open_checkpoint(ckpt)
    window.open_image(photo)
    wait_shown(qtbot, window, photo.name)

    titles: list[list[str]] = []
    real = ex.titled_figure
    monkeypatch.setattr(
        ex,
        "titled_figure",
        lambda grid, lines, *a, **k: titles.append(lines) or real(grid, lines, *a, **k),
    )
    ko = window.knockout
    ko.toggle(2, 1)
    ko.toggle(0, 2)
    qtbot.waitUntil(lambda: settled(window) and ko.knocked == {(2, 1), (0, 2)}, timeout=WAIT_MS)
    qtbot.waitUntil(lambda: window.viewer.image.knocked_out == ((0, 2), (2, 1)), timeout=WAIT_MS)
    assert "0.2, 2.1 knocked out" in window.viewer.map_view.full_title  # the window's title

    _export(qtbot, window, tmp_path / "heads.png", "heads")
    assert titles[-1][-1] == "knocked out (zero ablation): 0.2, 2.1"
    _export(qtbot, window, tmp_path / "ko.npz", "npz")
    with np.load(tmp_path / "ko.npz") as npz:
        np.testing.assert_array_equal(npz["ablated"], [[0, 2], [2, 1]])
        assert str(npz["ablation"]) == "zero"

    ko.act_restore.trigger()  # the clean model: its export names nothing knocked out
    qtbot.waitUntil(
        lambda: settled(window) and not window.viewer.image.knocked_out, timeout=WAIT_MS
    )
    _export(qtbot, window, tmp_path / "clean.png", "heads")
    assert not any("knocked out" in line for line in titles[-1])
    _export(qtbot, window, tmp_path / "clean.npz", "npz")
    with np.load(tmp_path / "clean.npz") as npz:
        assert "ablated" not in npz
