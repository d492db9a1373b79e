"""A LeViT in the window: one head-grid row per attention layer ("1.0" the subsample that
starts stage 1) with its heads, a click picks the token of each layer's stage covering the
cell, the big map of a subsample is its query row over the finer grid of its keys, the rollout
is the kind's, the methods a LeViT can't run are greyed out, and File ▸ Export writes the CLI's
npz."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from levit_helpers import save_folder, tiny_timm_levit
from staged_ui_checks import click_cell, export_equals_cli, show
from test_ui_window import (
    WAIT_MS,
    overlay,
    select_method,
    settled,
)
from window_watch import watched_window

from vitviz.explain.methods import get_method
from vitviz.kinds.levit.analysis import analyze_levit
from vitviz.kinds.levit.methods import block_rows

pytest.importorskip("timm")


@pytest.fixture
def window(qtbot, tmp_path: Path):
    yield from watched_window(qtbot, tmp_path)


def test_layers_click_rollout_and_export(qtbot, window, tmp_path: Path, photo_files) -> None:
    ckpt = save_folder(tiny_timm_levit(distilled=True, seed=5, size=96), tmp_path / "levit")
    image = photo_files["chelsea"]
    ref = show(qtbot, window, ckpt, image, analyze_levit)
    v = window.viewer
    assert v.head_grid.row_texts() == ["0.0", "1.0", "1.1", "1.2", "2.0", "2.1"]
    assert v.head_grid.row_heads() == [2, 4, 3, 3, 6, 4]
    v.controls.select(layer=1, head=1)  # the subsample: 3×3 queries over stage 0's 6×6 keys
    cell = (4, 1)
    click_cell(qtbot, window, cell)
    assert list(v.maps.query_tokens) == [25, 6, 6, 6, 2, 2]
    expected = block_rows(ref, 1, 6).numpy()[1]
    assert expected.shape == (6, 6)
    np.testing.assert_allclose(overlay(window), expected, atol=1e-6)
    select_method(qtbot, window, "rollout")
    qtbot.waitUntil(lambda: settled(window) and v.maps.params.method == "rollout", timeout=WAIT_MS)
    np.testing.assert_allclose(overlay(window), get_method("rollout")(ref, cell).numpy(), atol=1e-6)
    model = v.controls.method.model()
    for name in ("dino-masks", "grad-sam", "attention-gradcam", "transformer-attribution"):
        assert not model.item(v.controls.method.findData(name)).isEnabled(), name
    assert model.item(v.controls.method.findData("relevance")).isEnabled()
    got = export_equals_cli(qtbot, window, tmp_path, image, ckpt, "attention_1_0")
    assert got["attention_1_0"].shape == (4, 9, 36)
