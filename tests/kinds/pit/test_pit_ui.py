"""A PiT in the window: one head-grid row per block ("1.1") with its stage's heads, a click
picks the patch of each block's stage covering the cell, the big map is that block's query row
on its stage's grid, the prefix tokens' share of a block with fewer heads than the most, the
rollout is the kind's, the methods a PiT can't run are greyed out, and File ▸ Export writes the
CLI's npz."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pit_helpers import save_folder, tiny_timm_pit
from staged_ui_checks import click_cell, export_equals_cli, show
from test_ui_window import (
    WAIT_MS,
    overlay,
    select_method,
    settled,
)
from window_watch import watched_window

from vitviz.explain.methods import get_method
from vitviz.kinds.pit.analysis import analyze_pit
from vitviz.kinds.pit.methods import block_rows
from vitviz.ui.head_grid import MEAN

pytest.importorskip("timm")


@pytest.fixture
def window(qtbot, tmp_path: Path):
    yield from watched_window(qtbot, tmp_path)


def test_blocks_click_rollout_and_export(qtbot, window, tmp_path: Path, photo_files) -> None:
    ckpt = save_folder(tiny_timm_pit(distilled=True, seed=5), tmp_path / "pit")
    image = photo_files["chelsea"]
    ref = show(qtbot, window, ckpt, image, analyze_pit)
    v = window.viewer
    assert v.head_grid.row_texts() == ["0.0", "1.0", "1.1", "2.0"]
    assert v.head_grid.row_heads() == [2, 2, 2, 4]
    v.controls.select(layer=2, head=1)  # block 1.1: stage 1's 3×3 grid
    cell = (4, 1)
    click_cell(qtbot, window, cell)
    assert list(v.maps.query_tokens) == [4 * 5 + 1, 2 * 3 + 0, 2 * 3 + 0, 1 * 2 + 0]
    expected = block_rows(ref, 2, cell).numpy()[1]
    assert expected.shape == (3, 3)
    np.testing.assert_allclose(overlay(window), expected, atol=1e-6)
    v.controls.select(layer=0, head=MEAN)  # block 0.0: 2 of the 4 heads a block has at most
    qtbot.waitUntil(lambda: settled(window), timeout=WAIT_MS)
    row = ref.attentions[0][:, 2 + v.maps.query_tokens[0], :2].sum(dim=-1).mean()
    assert f"{float(row):.1%} of this query's attention" in v.controls.prefix_label.text()
    select_method(qtbot, window, "rollout")
    qtbot.waitUntil(lambda: settled(window) and v.maps.params.method == "rollout", timeout=WAIT_MS)
    np.testing.assert_allclose(overlay(window), get_method("rollout")(ref, cell).numpy(), atol=1e-6)
    model = v.controls.method.model()
    assert not model.item(v.controls.method.findData("grad-sam")).isEnabled()
    assert model.item(v.controls.method.findData("relevance")).isEnabled()
    export_equals_cli(qtbot, window, tmp_path, image, ckpt, "attention_1_1")
