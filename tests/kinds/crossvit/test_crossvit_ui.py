"""A CrossViT in the window: one head-grid row per attention layer ("0.S0", "0.L1", "0.S×L")
with its heads, a click picks the patch of each ViT block's branch covering the cell (the
cross-attention rows keep their one CLS query, whose share on the CLS key is said without a
patch queries' mean: it has none), the big map is that layer's query row on its
key branch's grid, the methods a CrossViT can't run are greyed out, and File ▸ Export writes
the CLI's npz."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from crossvit_helpers import save_folder, tiny_timm_crossvit
from staged_ui_checks import click_cell, export_equals_cli, show
from test_ui_window import (
    WAIT_MS,
    overlay,
    settled,
)
from window_watch import watched_window

from vitviz.kinds.crossvit.analysis import analyze_crossvit
from vitviz.kinds.crossvit.methods import layer_rows

pytest.importorskip("timm")


@pytest.fixture
def window(qtbot, tmp_path: Path):
    yield from watched_window(qtbot, tmp_path)


def test_layers_click_cross_attention_and_export(
    qtbot, window, tmp_path: Path, photo_files
) -> None:
    ckpt = save_folder(tiny_timm_crossvit(seed=5), tmp_path / "crossvit")
    image = photo_files["chelsea"]
    ref = show(qtbot, window, ckpt, image, analyze_crossvit)
    v = window.viewer
    rows = ["0.S0", "0.L0", "0.L1", "0.S×L", "0.L×S", "1.S0", "1.L0", "1.S×L", "1.L×S"]
    assert v.head_grid.row_texts() == rows
    assert v.head_grid.row_heads() == [2, 4, 4, 4, 2, 2, 4, 4, 2]
    v.controls.select(layer=2, head=1)  # block 0.L1: branch 1's 7×7 grid
    cell = (4, 1)  # centre y 54, x 18: branch 1's patch (3, 1) (tokens of 17.14 px)
    click_cell(qtbot, window, cell)
    assert list(v.maps.query_tokens) == [41, 22, 22, -1, -1, 41, 22, -1, -1]
    expected = layer_rows(ref, 2, cell).numpy()[1]
    assert expected.shape == (7, 7)
    np.testing.assert_allclose(overlay(window), expected, atol=1e-6)
    v.controls.select(layer=4, head=0)  # 0.L×S: branch 1's CLS over branch 0's 10×10 patches
    qtbot.waitUntil(lambda: settled(window), timeout=WAIT_MS)
    cls_row = ref.attentions[4][0, 0, 1:].reshape(10, 10).numpy()
    np.testing.assert_allclose(overlay(window), cls_row, atol=1e-6)
    title = v.map_view.full_title
    assert title.endswith("query: CLS token"), title  # its query is the CLS, not the click
    assert v._query_cell(v.maps, cls_row) is None  # the clicked cell is a key like any other
    share = float(ref.attentions[4][0, 0, 0])  # its one query's attention on the CLS key
    assert v.controls.prefix_label.text() == (
        f"Prefix tokens: {share:.1%} of this query's attention in this layer (no patch query here)."
    )
    model = v.controls.method.model()
    for name, enabled in (("rollout", False), ("relevance", False), ("gradcam", True)):
        assert model.item(v.controls.method.findData(name)).isEnabled() == enabled, name
    export_equals_cli(qtbot, window, tmp_path, image, ckpt, "attention_3")
