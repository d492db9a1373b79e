"""A PVT v2 in the window: one head-grid row per block ("2.1") with that stage's heads and the
key reduction in its tooltip, a click picks the token of each block's stage covering the cell,
the big map is that block's query row spread over its keys, the rollout is the kind's, the
methods a pyramid ViT can't run are greyed out, and File ▸ Export writes the CLI's npz."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pyramid_helpers import save_bare, tiny_timm_pvt
from staged_ui_checks import click_cell, export_equals_cli, show
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
from vitviz.ui.head_grid import MEAN

pytest.importorskip("timm")


@pytest.fixture
def window(qtbot, tmp_path: Path):
    yield from watched_window(qtbot, tmp_path)


@pytest.fixture
def pvt_shown(qtbot, window, tmp_path: Path, photo_files):
    """(the window, the analysis of the photo shown in it, the PVT's checkpoint)."""
    ckpt = save_bare(tiny_timm_pvt(), tmp_path / "pvt.pth")
    return window, show(qtbot, window, ckpt, photo_files["chelsea"], analyze_pyramid), ckpt


def test_blocks_click_and_rollout(qtbot, pvt_shown) -> None:
    window, ref, _ = pvt_shown
    v = window.viewer
    grid = v.head_grid
    assert grid.row_texts() == ["0.0", "1.0", "1.1", "2.0", "3.0"]
    assert grid.row_heads() == [1, 2, 2, 2, 4]
    assert "sr 8" in v.image.layer_rows[0].tooltip
    v.controls.select(layer=2, head=1)  # block 2.2
    assert "1.1" in v.controls.layer.text()
    cell = (9, 4)
    click_cell(qtbot, window, cell)
    centre = ((cell[0] + 0.5) * 4, (cell[1] + 0.5) * 4)
    for b, s in enumerate(ref.block_stages):
        W = ref.stage_grids[s][1]
        px = 4 * 2**s
        token = int(centre[0] // px) * W + int(centre[1] // px)
        assert v.maps.query_tokens[b] == token
    expected = block_rows(ref, 2, v.maps.query_tokens[2]).numpy()[1]
    np.testing.assert_allclose(overlay(window), expected, atol=1e-6)
    assert v.controls.head.count() == 1 + 2
    v.controls.select(layer=0, head=MEAN)
    select_method(qtbot, window, "rollout")
    qtbot.waitUntil(lambda: settled(window) and v.maps.params.method == "rollout", timeout=WAIT_MS)
    want = get_method("rollout")(ref, cell).numpy()
    np.testing.assert_allclose(overlay(window), want, atol=1e-6)
    model = v.controls.method.model()
    assert not model.item(v.controls.method.findData("transformer-attribution")).isEnabled()
    assert model.item(v.controls.method.findData("relevance")).isEnabled()
    assert not v.controls.param_panel.widgets["discard_ratio"].isEnabled()


def test_export_npz_from_the_window_equals_the_cli(
    qtbot, pvt_shown, photo_files, tmp_path: Path
) -> None:
    window, _, ckpt = pvt_shown
    select_method(qtbot, window, "rollout")
    qtbot.waitUntil(lambda: settled(window), timeout=WAIT_MS)
    export_equals_cli(qtbot, window, tmp_path, photo_files["chelsea"], ckpt, "stage_grids")


def test_hiera_in_the_window(qtbot, window, tmp_path: Path, photo_files) -> None:
    """A Hiera: a stage's first block attends from its pooled queries to the stage before, so
    its big map is drawn at that stage's grid; a click picks each block's query token."""
    import json

    import timm
    import torch
    from zoo_helpers import randomize_

    theirs = timm.create_model(
        "hiera_tiny_224", img_size=64, embed_dim=16, num_heads=1, stages=(1, 2, 1, 1),
        num_classes=5,
    )  # fmt: skip
    randomize_(theirs, seed=4)
    ckpt = tmp_path / "hiera.pth"
    torch.save(theirs.state_dict(), ckpt)
    side = {"stage_heads": [1, 2, 4, 8], "preprocessing": {"image_size": [64, 64]}}
    ckpt.with_name("hiera.pth.vitviz.json").write_text(json.dumps(side))
    image = photo_files["chelsea"]
    ref = show(qtbot, window, ckpt, image, analyze_pyramid)
    v = window.viewer
    assert v.head_grid.row_texts() == ["0.0", "1.0", "1.1", "2.0", "3.0"]
    assert "mask units" in v.image.layer_rows[0].tooltip
    v.controls.select(layer=1, head=0)  # block 2.1: 8×8 pooled queries over 16×16 keys
    cell = (9, 4)
    click_cell(qtbot, window, cell)
    assert v.maps.query_tokens[1] == (38 // 8) * 8 + 18 // 8
    expected = block_rows(ref, 1, v.maps.query_tokens[1]).numpy()[0]
    assert expected.shape == (16, 16)
    np.testing.assert_allclose(overlay(window), expected, atol=1e-6)
