"""A transformers PVT v1 in the window: one head-grid row per block with that stage's heads, a
click picks the token of each block's stage covering the cell, the big map of a last-stage
block is that query's row over the grid's keys (its CLS key's share left off), the rollout
starts from the last stage's token, the methods a pyramid ViT can't run are greyed out, and
File ▸ Export writes the CLI's npz (the blocks' CLS counts with it)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from staged_ui_checks import click_cell, export_equals_cli, show
from test_pyramid_hf_pvt1 import saved_pvt1
from test_ui_window import (
    WAIT_MS,
    overlay,
    select_method,
    settled,
)
from window_watch import watched_window

from vitviz.explain.methods import get_method
from vitviz.kinds.pyramid.analysis import analyze_pyramid
from vitviz.kinds.pyramid.methods import block_rows

pytest.importorskip("transformers")


@pytest.fixture
def window(qtbot, tmp_path: Path):
    yield from watched_window(qtbot, tmp_path)


def test_blocks_click_rollout_and_export(qtbot, window, tmp_path: Path, photo_files) -> None:
    _, ckpt = saved_pvt1(tmp_path / "pvt", "PvtForImageClassification", seed=4)
    image = photo_files["chelsea"]
    ref = show(qtbot, window, ckpt, image, analyze_pyramid)
    v = window.viewer
    assert v.head_grid.row_texts() == ["0.0", "1.0", "1.1", "2.0", "3.0", "3.1"]
    assert v.head_grid.row_heads() == [1, 2, 2, 2, 4, 4]
    assert "and the CLS" in v.image.layer_rows[5].tooltip
    assert "CLS" not in v.image.layer_rows[3].tooltip
    v.controls.select(layer=5, head=2)  # the last block: the CLS and a 2×2 grid
    cell = (9, 4)  # centre (38, 18) px: the last stage's token (1, 0)
    click_cell(qtbot, window, cell)
    assert list(v.maps.query_tokens) == [9 * 16 + 4, 4 * 8 + 2, 4 * 8 + 2, 2 * 4 + 1, 2, 2]
    expected = ref.attentions[5][2, 1 + 2, 1:].double().reshape(2, 2).numpy()
    np.testing.assert_allclose(block_rows(ref, 5, 2).numpy()[2], expected, atol=1e-7)
    np.testing.assert_allclose(overlay(window), expected, atol=1e-6)
    select_method(qtbot, window, "rollout")
    qtbot.waitUntil(lambda: settled(window) and v.maps.params.method == "rollout", timeout=WAIT_MS)
    np.testing.assert_allclose(overlay(window), get_method("rollout")(ref, cell).numpy(), atol=1e-6)
    model = v.controls.method.model()
    assert not model.item(v.controls.method.findData("transformer-attribution")).isEnabled()
    assert model.item(v.controls.method.findData("relevance")).isEnabled()
    got = export_equals_cli(qtbot, window, tmp_path, image, ckpt)
    assert got["block_prefix"].tolist() == [0, 0, 0, 0, 1, 1]
    assert got["attention_3_1"].shape == (4, 5, 5)
