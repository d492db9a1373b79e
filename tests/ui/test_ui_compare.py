"""File ▸ Compare with…: a second checkpoint beside the current one on the viewer's image.
Both large maps are each model's map of the chosen method, a click makes that patch the
query of both, the difference mode shows A − B, the head grid is compare's head similarity
and both predictions are listed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from conftest import CLASS_NAMES, random_vit
from test_ui_window import WAIT_MS, click, drop, new_window, wait_shown

from vitviz.checkpoints import load_checkpoint, save_checkpoint
from vitviz.pipeline.analysis import analyze
from vitviz.pipeline.compare import compare_analyses
from vitviz.ui.compare_window import MAX_HEAD_TICKS, every


def _settled(window, query) -> bool:
    c = window.compare
    return (
        c is not None and c.result is not None and c.result.query == query
        and not window.client.is_busy()
    )  # fmt: skip


def test_compare_shows_both_models_in_sync(qtbot, tmp_path: Path, tiny_ckpt: Path, photo_files):
    window = new_window(qtbot, tmp_path / "settings" / "vitviz.ini")
    image = photo_files["chelsea"]
    drop(window, [image, tiny_ckpt])
    wait_shown(qtbot, window, image.name)
    other = save_checkpoint(random_vit(seed=7), tmp_path / "epoch1.safetensors",
                            class_names=CLASS_NAMES)  # fmt: skip
    window.compare_with(other)
    qtbot.waitUntil(lambda: _settled(window, None), timeout=WAIT_MS)
    c = window.compare
    assert c.isVisible() and c.method.currentData() == window.viewer.controls.method_name()
    a_loaded, b_loaded = load_checkpoint(tiny_ckpt), load_checkpoint(other)
    a, b = analyze(a_loaded, image), analyze(b_loaded, image)
    want = compare_analyses(a_loaded, a, b_loaded, b)
    np.testing.assert_allclose(c.result.head_similarity, want.head_similarity, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(c.heads_image.image), want.head_similarity, rtol=1e-5)
    # the grid's colour scale beside it: 0 to 1, driving the grid's colours
    bar = c.heads_bar
    assert bar.scene() is c.heads.scene() and bar.isVisible()
    assert tuple(bar.levels()) == (0.0, 1.0) and tuple(c.heads_image.levels) == (0.0, 1.0)
    ticks = [t for _, t in bar.axis._tickLevels[0]]
    assert "0" in ticks and "1" in ticks
    grid = c.heads.getPlotItem().vb  # the bar beside the grid's box, once Qt has laid it out
    qtbot.waitUntil(
        lambda: bar.mapRectToScene(bar.boundingRect()).left() >= grid.sceneBoundingRect().right(),
        timeout=WAIT_MS,
    )
    cols = want.head_similarity.shape[1]
    assert c.heads.getAxis("bottom")._tickLevels[0] == every(cols, MAX_HEAD_TICKS)
    assert "epoch1.safetensors" in c.pred_b.text() and CLASS_NAMES[b.top_class] in c.pred_b.text()

    c.method.setCurrentIndex(c.method.findData("rollout"))
    qtbot.waitUntil(lambda: _settled(window, None) and c.result.method == "rollout",
                    timeout=WAIT_MS)  # fmt: skip
    np.testing.assert_allclose(np.asarray(c.view_a.overlay.image), want.rollout_a, atol=1e-6)
    np.testing.assert_allclose(np.asarray(c.view_b.overlay.image), want.rollout_b, atol=1e-6)

    view = c.view_b
    click(view, view.vb.mapViewToScene(view.patch_rect(1, 2).center()))
    assert c.query == (1, 2)
    qtbot.waitUntil(lambda: _settled(window, (1, 2)), timeout=WAIT_MS)
    np.testing.assert_allclose(np.asarray(c.view_a.overlay.image), a.rollout((1, 2)).numpy(),
                               atol=1e-6)  # fmt: skip
    np.testing.assert_allclose(np.asarray(c.view_b.overlay.image), b.rollout((1, 2)).numpy(),
                               atol=1e-6)  # fmt: skip
    assert c.view_a.query_box.isVisible()

    c.diff.setChecked(True)
    assert c.view_diff.isVisible()
    a_minus_b = a.rollout((1, 2)).numpy() - b.rollout((1, 2)).numpy()
    np.testing.assert_allclose(np.asarray(c.view_diff.overlay.image), a_minus_b, atol=1e-6)


def test_the_head_numbers_thin_out_to_fit_the_narrow_grid() -> None:
    assert every(4, MAX_HEAD_TICKS) == [(0, "0"), (1, "1"), (2, "2"), (3, "3")]
    assert [v for v, _ in every(12, MAX_HEAD_TICKS)] == [0, 2, 4, 6, 8, 10]
    assert [v for v, _ in every(24, MAX_HEAD_TICKS)] == [0, 4, 8, 12, 16, 20]  # a Swin's stage 4
