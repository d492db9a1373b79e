"""A Sapiens2 (timm's Eva with grouped-query attention: 4 query heads sharing 2 key/value heads
in the middle blocks) in the window: the head grid shows every query head of every block, a
tile click shows that head large under a title naming it, Alt+click knocks a query head out
(the predictions are the intervened model's) and the model line names the model's shape."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from test_ui_window import WAIT_MS, click, settled, wait_shown
from test_zoo_sapiens2 import SIZE, tiny
from window_watch import watched_window

from vitviz.checkpoints import load_checkpoint
from vitviz.pipeline.analysis import analyze
from vitviz.ui.main_window import MainWindow


@pytest.fixture
def window(qtbot, tmp_path: Path) -> MainWindow:
    yield from watched_window(qtbot, tmp_path)


def test_query_heads_shown_and_knocked_out(qtbot, window, tmp_path: Path, photo_files) -> None:
    from timm.models import save_for_hf

    model = tiny(seed=1)
    folder = tmp_path / "sapiens2-tiny"
    save_for_hf(model, folder, safe_serialization=True)
    settings = {"preprocessing": {"image_size": [SIZE, SIZE]}}
    window.open_checkpoint(folder, settings)
    photo = photo_files["chelsea"]
    window.open_image(photo)
    wait_shown(qtbot, window, photo.name)
    loaded = load_checkpoint(folder, settings)
    clean = analyze(loaded, photo)
    np.testing.assert_allclose(window.viewer.image.probs, clean.probs.numpy(), atol=1e-5)
    assert "4 layers × 4 heads" in window.model_label.text()

    grid = window.viewer.head_grid  # every block's 4 query heads (2 kv heads in the middle)
    assert grid.shape == (4, 4) and grid.row_heads() == [4, 4, 4, 4]
    click(grid, grid.tile_center(2, 3))  # a middle block's head, one of a shared kv pair
    ctl = window.viewer.controls
    qtbot.waitUntil(lambda: settled(window) and ctl.selected_head() == 3, timeout=WAIT_MS)
    assert ctl.selected_layer() == 2
    title = window.viewer.map_view.full_title
    assert "layer 2 of 0–3" in title and "head 3" in title, title
    shown = np.asarray(window.viewer.map_view.overlay.image)
    want = clean.attention_maps(2)[3].numpy()  # query head 3 (kv head 1) of block 2
    np.testing.assert_allclose(shown, want, atol=1e-6)

    ko = window.knockout
    pos = grid.mapFromScene(grid.tile_center(1, 2))
    QTest.mouseClick(grid.viewport(), Qt.MouseButton.LeftButton, Qt.KeyboardModifier.AltModifier,
                     pos)  # fmt: skip
    qtbot.waitUntil(lambda: settled(window) and ko.knocked == {(1, 2)}, timeout=WAIT_MS)
    want = analyze(loaded, photo, ablate=[(1, 2)]).probs.numpy()
    assert np.abs(want - clean.probs.numpy()).max() > 1e-4  # the head matters
    qtbot.waitUntil(
        lambda: np.abs(np.asarray(window.viewer.image.probs) - want).max() < 1e-5,
        timeout=WAIT_MS,
    )
    assert "1.2" in ko.status.text()
