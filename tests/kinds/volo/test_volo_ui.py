"""A VOLO in the window: one head-grid row per attention layer ("0.0", "1.0", "cls.0") with its
heads, a click picks the cell itself in an outlooker (its row of the folded window weights on
the 8×8 grid) and the half-grid token under it in a transformer block, a class block keeps its
CLS query, the methods a VOLO can't run are greyed out, and
File ▸ Export writes the CLI's npz."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from staged_ui_checks import click_cell, export_equals_cli, show
from test_ui_window import WAIT_MS, overlay, settled
from volo_helpers import save_folder, tiny_timm_volo
from window_watch import watched_window

from vitviz.kinds.volo.analysis import analyze_volo
from vitviz.kinds.volo.methods import layer_rows

pytest.importorskip("timm")


@pytest.fixture
def window(qtbot, tmp_path: Path):
    yield from watched_window(qtbot, tmp_path)


def test_layers_click_class_block_and_export(qtbot, window, tmp_path: Path, photo_files) -> None:
    ckpt = save_folder(tiny_timm_volo(seed=5), tmp_path / "volo")
    image = photo_files["chelsea"]
    ref = show(qtbot, window, ckpt, image, analyze_volo)
    v = window.viewer
    assert v.head_grid.row_texts() == ["0.0", "0.1", "1.0", "2.0", "3.0", "cls.0", "cls.1"]
    assert v.head_grid.row_heads() == [6, 6, 12, 12, 12, 12, 12]
    v.controls.select(layer=1, head=2)  # the second outlooker, on the 8×8 grid
    cell = (5, 2)
    click_cell(qtbot, window, cell)
    assert list(v.maps.query_tokens) == [42, 42, 9, 9, 9, -1, -1]
    np.testing.assert_allclose(overlay(window), layer_rows(ref, 1, cell).numpy()[2], atol=1e-6)
    v.controls.select(layer=3, head=4)  # a transformer block: the 4×4 token (2, 1)
    qtbot.waitUntil(lambda: settled(window), timeout=WAIT_MS)
    np.testing.assert_allclose(overlay(window), layer_rows(ref, 3, cell).numpy()[4], atol=1e-6)
    v.controls.select(layer=6, head=0)  # cls.1: the CLS over the 4×4 patches
    qtbot.waitUntil(lambda: settled(window), timeout=WAIT_MS)
    cls_row = ref.attentions[6][0, 0, 1:].reshape(4, 4).numpy()
    np.testing.assert_allclose(overlay(window), cls_row, atol=1e-6)
    model = v.controls.method.model()
    for name, enabled in (("rollout", False), ("dino-masks", False), ("gradcam", True)):
        assert model.item(v.controls.method.findData(name)).isEnabled() == enabled, name
    export_equals_cli(qtbot, window, tmp_path, image, ckpt, "window_cells")
