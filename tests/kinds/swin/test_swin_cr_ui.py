"""A SwinV2-CR in the window: its blocks' rows with their stage's heads, a click picks
``token_at``'s token and the big map is that block's ``query_row``, the rollout is the kind's,
the methods a Swin can't run are greyed out, and Model ▸ Model and preprocessing calls it a
Swin V2-CR."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from staged_ui_checks import click_cell
from swin_helpers import tiny_timm_swin_cr
from test_ui_window import (
    WAIT_MS,
    drop,
    new_window,
    overlay,
    select_method,
    settled,
    wait_shown,
)
from timm.models import save_for_hf

from vitviz.checkpoints import load_checkpoint
from vitviz.kinds.swin.analysis import analyze_swin
from vitviz.kinds.swin.attention import query_row, token_at
from vitviz.ui.main_window import MainWindow

SIZE = 64  # stage grids 16×16 and 8×8, windows of 4


@pytest.fixture
def cr_shown(qtbot, tmp_path: Path, photo_files):
    ckpt = tmp_path / "swinv2_cr"
    save_for_hf(tiny_timm_swin_cr(SIZE, name="swinv2_cr_tiny_ns_224", seed=2), ckpt)
    window: MainWindow = new_window(qtbot, tmp_path / "settings.ini")
    bugs: list[str] = []
    window.notifier.bugReported.connect(lambda summary, details: bugs.append(details))
    image = photo_files["chelsea"]
    drop(window, [image, ckpt])
    wait_shown(qtbot, window, image.name)
    yield window, analyze_swin(load_checkpoint(ckpt), image)
    assert not bugs, f"the bug dialog was shown: {bugs}"


def test_rows_click_rollout_and_greyed_methods(qtbot, cr_shown) -> None:
    window, ref = cr_shown
    v = window.viewer
    assert v.head_grid.row_texts() == ["0.0 W", "0.1 SW", "1.0 W", "1.1 SW"]
    assert v.head_grid.row_heads() == [2, 2, 4, 4]
    v.controls.select(layer=3, head=2)  # the last block: SW-MSA on the 8×8 grid
    cell = (9, 5)
    click_cell(qtbot, window, cell)
    layout = ref.layouts[3]
    token = token_at(layout, 8, ((cell[0] + 0.5) * 4, (cell[1] + 0.5) * 4))
    assert v.maps.query_tokens[3] == token
    want = query_row(ref.attentions[3], layout, token)[2].numpy().reshape(layout.grid)
    np.testing.assert_allclose(overlay(window), want, atol=1e-6)
    select_method(qtbot, window, "rollout")
    qtbot.waitUntil(lambda: settled(window) and v.maps.params.method == "rollout", timeout=WAIT_MS)
    rollout = ref.rollout(query=token, query_stage=1)  # from the clicked token, last stage
    np.testing.assert_allclose(overlay(window), rollout.numpy(), atol=1e-6)
    methods = v.controls.method
    for name in ("relevance", "transformer-attribution"):
        assert not methods.model().item(methods.findData(name)).isEnabled()
    for name in ("attention", "gradient-rollout", "gradcam"):
        assert methods.model().item(methods.findData(name)).isEnabled()


def test_model_info_calls_it_a_swin_v2_cr(qtbot, cr_shown) -> None:
    from PySide6.QtWidgets import QPlainTextEdit

    window, _ = cr_shown
    window.act_model_info.trigger()
    facts = window.info_dialog.findChild(QPlainTextEdit).toPlainText()
    assert "architecture: Swin V2-CR, 2 stages, 4 blocks (depths 2-2)" in facts, facts
    assert "MLP bias over log offsets (V2-CR)" in facts
    window.info_dialog.reject()


def test_gradcam_says_and_reads_the_layer_auto_resolves_to(qtbot, cr_shown) -> None:
    """A SwinV2-CR's blocks are post-norm (DESIGN §5): the picker and the map's title say
    ``auto`` reads the last block's output and that a norm1 follows its attention, and the
    window's map is the table's on the layer picked (not always the last norm1)."""
    from vitviz.explain.methods import get_method

    window, ref = cr_shown
    v = window.viewer
    picker = v.controls.cam_layer
    select_method(qtbot, window, "gradcam")
    qtbot.waitUntil(lambda: settled(window) and v.maps.params.method == "gradcam", timeout=WAIT_MS)
    assert picker.currentText() == "auto (3.output)"
    assert picker.itemText(picker.findData("1.norm1")) == "1.norm1 (after its attention)"
    assert "target layer auto (3.output)" in v.map_view.full_title
    gradcam = get_method("gradcam")
    auto = gradcam(ref, None, None, {"layer": "auto"}).numpy()
    np.testing.assert_allclose(v.maps.method_map, auto, atol=1e-5)
    picker.lineEdit().setText("-1.norm1")
    picker.lineEdit().editingFinished.emit()
    qtbot.waitUntil(
        lambda: settled(window) and v.maps.params.params().get("layer") == "-1.norm1",
        timeout=WAIT_MS,
    )
    norm1 = gradcam(ref, None, None, {"layer": "-1.norm1"}).numpy()
    np.testing.assert_allclose(v.maps.method_map, norm1, atol=1e-5)
    assert not np.allclose(auto, norm1, atol=1e-3)
    assert "target layer -1.norm1 (last block, after its attention)" in v.map_view.full_title
