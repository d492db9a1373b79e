"""An MViTv2 in the window: one head-grid row per block ("1.1") with its stage's heads, a click
picks the query token of each block's stage covering the cell, the big map is that block's query
row over its pooled key grid, the CLS token's share of a block with fewer heads than the most,
the methods an MViTv2 can't run are greyed out, and File ▸ Export writes the CLI's npz."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from mvit_helpers import save_bare, tiny_timm_mvit
from staged_ui_checks import click_cell, export_equals_cli, show
from test_ui_window import (
    WAIT_MS,
    overlay,
    settled,
)
from window_watch import watched_window

from vitviz.kinds.mvit.analysis import analyze_mvit
from vitviz.kinds.mvit.methods import block_rows
from vitviz.ui.head_grid import MEAN

pytest.importorskip("timm")


@pytest.fixture
def window(qtbot, tmp_path: Path):
    yield from watched_window(qtbot, tmp_path)


def test_blocks_click_greyed_methods_and_export(qtbot, window, tmp_path: Path, photo_files) -> None:
    ckpt = save_bare(tiny_timm_mvit(cls=True, seed=5), tmp_path / "mvit.pth")
    image = photo_files["chelsea"]
    ref = show(qtbot, window, ckpt, image, analyze_mvit)
    v = window.viewer
    assert v.head_grid.row_texts() == ["0.0", "1.0", "1.1", "2.0", "3.0"]
    assert v.head_grid.row_heads() == [1, 2, 2, 4, 8]
    v.controls.select(layer=2, head=1)  # block 1.1: 8×8 queries over 4×4 pooled keys
    cell = (9, 2)
    click_cell(qtbot, window, cell)
    assert list(v.maps.query_tokens) == [9 * 16 + 2, 4 * 8 + 1, 4 * 8 + 1, 2 * 4 + 0, 1 * 2 + 0]
    expected = block_rows(ref, 2, cell).numpy()[1]
    assert expected.shape == (4, 4)
    np.testing.assert_allclose(overlay(window), expected, atol=1e-6)
    v.controls.select(layer=0, head=MEAN)  # block 0.0: 1 of the 8 heads a block has at most
    qtbot.waitUntil(lambda: settled(window), timeout=WAIT_MS)
    share = ref.attentions[0][:, 1 + v.maps.query_tokens[0], 0].mean()
    assert f"{float(share):.1%} of this query's attention" in v.controls.prefix_label.text()
    model = v.controls.method.model()
    for name in ("rollout", "relevance", "grad-sam", "dino-masks"):
        assert not model.item(v.controls.method.findData(name)).isEnabled(), name
    assert model.item(v.controls.method.findData("gradcam")).isEnabled()
    got = export_equals_cli(qtbot, window, tmp_path, image, ckpt, "attention_1_1")
    assert got["key_grids"].tolist() == [[4, 4], [8, 8], [4, 4], [8, 8], [4, 4]]
