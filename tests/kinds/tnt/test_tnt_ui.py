"""A TNT in the window: one head-grid row per block ("0", "1") with its outer heads, a click
picks the patch, the big map is that block's outer attention row over the patch grid, the CLS
token's share, transformer attribution greyed out and the ViT's other methods offered, and
File ▸ Export writes the CLI's npz."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from staged_ui_checks import click_cell, export_equals_cli, show
from test_ui_window import (
    overlay,
)
from tnt_helpers import SETTINGS, save_bare, tiny_timm_tnt
from window_watch import watched_window

from vitviz.kinds.tnt.analysis import analyze_tnt
from vitviz.kinds.tnt.methods import block_rows

pytest.importorskip("timm")


@pytest.fixture
def window(qtbot, tmp_path: Path):
    yield from watched_window(qtbot, tmp_path)


def test_blocks_click_greyed_methods_and_export(qtbot, window, tmp_path: Path, photo_files) -> None:
    ckpt = save_bare(tiny_timm_tnt(seed=5), tmp_path / "tnt.pth", SETTINGS)
    image = photo_files["chelsea"]
    ref = show(qtbot, window, ckpt, image, analyze_tnt)
    v = window.viewer
    assert v.head_grid.row_texts() == ["0", "1"]
    assert v.head_grid.row_heads() == [4, 4]
    v.controls.select(layer=1, head=3)
    cell = (2, 1)
    click_cell(qtbot, window, cell)
    assert list(v.maps.query_tokens) == [2 * 4 + 1] * 2
    expected = block_rows(ref, 1, cell).numpy()[3]
    assert expected.shape == (4, 4)
    np.testing.assert_allclose(overlay(window), expected, atol=1e-6)
    share = ref.attentions[1][3, 1 + 2 * 4 + 1, 0]
    assert f"{float(share):.1%} of this query's attention" in v.controls.prefix_label.text()
    model = v.controls.method.model()
    assert not model.item(v.controls.method.findData("transformer-attribution")).isEnabled()
    for name in ("rollout", "relevance", "grad-sam", "dino-masks", "gradcam"):
        assert model.item(v.controls.method.findData(name)).isEnabled(), name
    got = export_equals_cli(qtbot, window, tmp_path, image, ckpt, "attention_1")
    assert got["grid"].tolist() == [4, 4] and got["pixel_grid"].tolist() == [2, 2]
