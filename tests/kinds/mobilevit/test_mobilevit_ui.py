"""A MobileViT in the window: one head-grid row per transformer layer ("0.1": MobileViT block
0's second layer) with its heads, a click picks the feature pixel of each layer's stage under
the cell (its offset in its 2×2 patch and its patch), the big map is that offset's row over
the stage's patch grid, the methods a MobileViT can't run are greyed out, and File ▸ Export
writes the CLI's npz."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from mobilevit_helpers import BARE_SETTINGS, save_bare, tiny_timm_mobilevit
from staged_ui_checks import click_cell, export_equals_cli, show
from test_ui_window import overlay
from window_watch import watched_window

from vitviz.kinds.mobilevit.analysis import analyze_mobilevit
from vitviz.kinds.mobilevit.methods import layer_rows

pytest.importorskip("timm")


@pytest.fixture
def window(qtbot, tmp_path: Path):
    yield from watched_window(qtbot, tmp_path)


def test_layers_click_and_export(qtbot, window, tmp_path: Path, photo_files) -> None:
    ckpt = save_bare(tiny_timm_mobilevit(seed=5), tmp_path / "mvit.pth", BARE_SETTINGS)
    image = photo_files["chelsea"]
    ref = show(qtbot, window, ckpt, image, analyze_mobilevit)
    v = window.viewer
    assert v.head_grid.row_texts() == ["0.0", "0.1", "1.0"]
    assert v.head_grid.row_heads() == [2, 2, 2]
    # at the preprocessing's 256 px: block 0's stage 32×32 pixels of 8 px (the clickable
    # cells) in 16×16 patches, block 1's 16×16 pixels of 16 px in 8×8 patches
    v.controls.select(layer=2, head=1)  # layer 1.0
    cell = (5, 2)  # in layer 1.0 pixel (2, 1): offset (0, 1) of patch (1, 0)
    click_cell(qtbot, window, cell)
    assert list(v.maps.query_tokens) == [2 * 16 + 1, 2 * 16 + 1, 1 * 8 + 0]
    assert ref.offset_and_patch(2, cell) == (1, 8)
    expected = layer_rows(ref, 2, cell).numpy()[1]
    assert expected.shape == (8, 8)
    np.testing.assert_allclose(overlay(window), expected, atol=1e-6)
    model = v.controls.method.model()
    for name in ("rollout", "relevance", "dino-masks"):
        assert not model.item(v.controls.method.findData(name)).isEnabled()
    assert model.item(v.controls.method.findData("gradcam")).isEnabled()
    got = export_equals_cli(qtbot, window, tmp_path, image, ckpt, "attention_0_1")
    assert got["attention_1_0"].shape == (2, 4, 64, 64)
