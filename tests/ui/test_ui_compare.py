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
from vitviz.core.resources import DEFAULT_MODEL_NAME, resource_dir
from vitviz.imaging.colormaps import nice_levels
from vitviz.pipeline.analysis import analyze
from vitviz.pipeline.compare import ModelSession, compare_analyses
from vitviz.ui.compare_window import (
    DIFF_SCALE,
    MAX_HEAD_TICKS,
    OWN_SCALE,
    SAME_MAPS,
    SHARED_SCALE,
    every,
    shared_levels,
)
from vitviz.ui.main_window import COMPARE_SIZE, FRAME_ROOM, fitted_size


def _settled(window, query) -> bool:
    c = window.compare
    return (
        c is not None and c.result is not None and c.result.query == query
        and not window.client.is_busy()
    )  # fmt: skip


def _compared(qtbot, tmp_path: Path, a: Path, b: Path, image: Path):
    """A new window showing ``image`` with checkpoint ``a``, compared with ``b``, settled;
    returns the window."""
    window = new_window(qtbot, tmp_path / "settings" / "vitviz.ini")
    drop(window, [image, a])
    wait_shown(qtbot, window, image.name)
    window.compare_with(b)
    qtbot.waitUntil(lambda: _settled(window, None), timeout=WAIT_MS)
    return window


def test_compare_shows_both_models_in_sync(qtbot, tmp_path: Path, tiny_ckpt: Path, photo_files):
    image = photo_files["chelsea"]
    other = save_checkpoint(random_vit(seed=7), tmp_path / "epoch1.safetensors",
                            class_names=CLASS_NAMES)  # fmt: skip
    window = _compared(qtbot, tmp_path, tiny_ckpt, other, image)
    c = window.compare
    assert c.isVisible() and c.method.currentData() == window.viewer.controls.method_name()
    free = c.screen().availableGeometry()  # opened on the screen, never wider or taller
    assert c.width() <= free.width() and c.height() <= free.height(), (c.size(), free)
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


def test_one_colour_scale_for_both_maps_set_by_either() -> None:
    a = np.array([[0.0, 0.1], [0.05, 0.02]], dtype=np.float32)
    b = np.array([[0.0, 0.43], [0.2, np.nan]], dtype=np.float32)  # B's peak sets the top
    assert shared_levels(a, b) == shared_levels(b, a) == (0.0, 0.5)
    assert shared_levels(a, None) == nice_levels(a)  # A alone: the viewer's scale of A
    assert shared_levels(None, np.full((2, 2), np.nan)) is None


def test_both_maps_on_one_scale_said_on_both_bars_and_same_maps_said(
    qtbot, tmp_path: Path, tiny_ckpt: Path, photo_files
) -> None:
    other = save_checkpoint(random_vit(seed=7), tmp_path / "b.safetensors",
                            class_names=CLASS_NAMES)  # fmt: skip
    window = _compared(qtbot, tmp_path, tiny_ckpt, other, photo_files["chelsea"])
    c = window.compare
    r = c.result
    levels = shared_levels(r.map_a, r.map_b)
    assert levels is not None and levels[1] >= max(np.nanmax(r.map_a), np.nanmax(r.map_b))
    for view in (c.view_a, c.view_b):
        np.testing.assert_allclose(view.colorbar.levels(), levels, rtol=1e-6)
        np.testing.assert_allclose(view.overlay.levels, levels, rtol=1e-6)
        axis = view.colorbar.axis
        assert axis.label.isVisible() and SHARED_SCALE in axis.labelString()
    c.one_scale.setChecked(False)  # each map on its own scale, said along its bar
    for view, values, who in ((c.view_a, r.map_a, "A"), (c.view_b, r.map_b, "B")):
        np.testing.assert_allclose(view.colorbar.levels(), nice_levels(values), rtol=1e-6)
        assert OWN_SCALE.format(who=who) in view.colorbar.axis.labelString()
    c.one_scale.setChecked(True)
    np.testing.assert_allclose(c.view_b.colorbar.levels(), levels, rtol=1e-6)
    assert c.method.currentData() == "attention"  # made at its defaults, and said so
    said = c.settings_label.text()
    assert "Layer: the last layer" in said and "Head: the mean of the heads" in said, said

    same = tmp_path / "a-again.safetensors"  # A itself under another name: A − B is 0
    same.write_bytes(tiny_ckpt.read_bytes())
    c.diff.setChecked(True)
    window.compare_with(same)
    qtbot.waitUntil(
        lambda: _settled(window, None) and c.result.name_b == same.name, timeout=WAIT_MS
    )
    assert c.view_diff.notice_text() == SAME_MAPS
    assert not c.view_diff.overlay.isVisible() and not c.view_diff.colorbar.isVisible()


def test_a_model_without_a_map_says_why_in_its_view(qtbot, tmp_path: Path, photo_files) -> None:
    """A on an 8 × 8 grid, B on a 4 × 4 one: A's grid lines are not drawn over B's coarser
    map; a query of A's is B's cell at the same place of the image (A's cell (6, 5) of 8 px
    cells on 64 px, centre (52, 44) px, is B's (3, 2) of 8 px cells on 32 px); a map B can't
    make leaves its view blank with the reason in it."""
    import dataclasses

    a = save_checkpoint(random_vit(seed=2, image_size=64), tmp_path / "a.safetensors",
                        class_names=CLASS_NAMES)  # fmt: skip
    b = save_checkpoint(random_vit(seed=7), tmp_path / "b.safetensors", class_names=CLASS_NAMES)
    window = _compared(qtbot, tmp_path, a, b, photo_files["chelsea"])
    c = window.compare
    assert c.result.map_a.shape == (8, 8) and c.result.map_b.shape == (4, 4)
    assert c.view_a.grid_lines.isVisible() and not c.view_b.grid_lines.isVisible()
    assert c.view_a.notice_text() == c.view_b.notice_text() == ""
    c.diff.setChecked(True)  # no A − B of two grids, and the view says which
    assert c.view_diff.notice_text() == "No A − B map: A's map is 8×8 cells, B's 4×4 (other grids)."
    no_query = c.result.map_b
    c.set_query((6, 5))
    qtbot.waitUntil(lambda: _settled(window, (6, 5)), timeout=WAIT_MS)
    assert c.result.query_b == (3, 2) and c.result.map_b is not None
    assert not np.array_equal(c.result.map_b, no_query)  # B's map is of its query cell
    assert c.view_b.notice_text() == ""
    why = "B's kind can't make this map here"
    c.apply_compare(dataclasses.replace(c.result, map_b=None, errors=("", why), error=why))
    said = c.view_b.notice_text()
    assert said == f"No map from B: {why}", said
    assert c.view_a.notice_text() == ""
    assert c.view_diff.notice_text() == "No A − B map: B made no map here."


def test_the_compare_window_fits_a_small_screen() -> None:
    assert fitted_size(COMPARE_SIZE, (1920, 1050)) == COMPARE_SIZE
    width, height = fitted_size(COMPARE_SIZE, (1366, 740))  # a 1366 × 768 laptop's free area
    assert width <= 1366 - FRAME_ROOM[0] and height <= 740 - FRAME_ROOM[1]
    assert fitted_size(COMPARE_SIZE, None) == COMPARE_SIZE


def test_each_side_is_titled_with_the_model_method_and_image_it_shows(
    qtbot, tmp_path: Path, tiny_ckpt: Path, photo_files
) -> None:
    """Each view's title names what it shows, from its result: its model (A: first the heads
    knocked out of it, and how), the method and the image; a new method or image renames
    both."""
    window = new_window(qtbot, tmp_path / "settings" / "vitviz.ini")
    cat, rocket = photo_files["chelsea"], photo_files["rocket"]
    drop(window, [cat, tiny_ckpt])
    wait_shown(qtbot, window, cat.name)
    other = save_checkpoint(random_vit(seed=7), tmp_path / "other.safetensors",
                            class_names=CLASS_NAMES)  # fmt: skip
    window.compare_with(other)
    qtbot.waitUntil(lambda: _settled(window, None), timeout=WAIT_MS)
    c = window.compare
    label = c.method.currentText()
    assert c.view_a.full_title == f"A · {tiny_ckpt.name} · {label} · {cat.name}"
    assert c.view_b.full_title == f"B · {other.name} · {label} · {cat.name}"

    c.method.setCurrentIndex(c.method.findData("rollout"))
    qtbot.waitUntil(lambda: _settled(window, None) and c.result.method == "rollout",
                    timeout=WAIT_MS)  # fmt: skip
    rollout = c.method.currentText()
    assert rollout != label
    assert c.view_b.full_title == f"B · {other.name} · {rollout} · {cat.name}"
    c.diff.setChecked(True)
    assert c.view_diff.full_title == f"A − B · {rollout} · {cat.name}"
    axis = c.view_diff.colorbar.axis  # its scale says what its colours mean
    assert axis.label.isVisible() and axis.labelString().find(DIFF_SCALE) >= 0

    window.open_image(rocket)  # the viewer's new image: both sides are of it
    qtbot.waitUntil(lambda: _settled(window, None) and c.result.image_label == rocket.name,
                    timeout=WAIT_MS)  # fmt: skip
    assert c.view_a.full_title == f"A · {tiny_ckpt.name} · {rollout} · {rocket.name}"

    window.knockout.toggle(0, 1)  # A is the viewer's model, with its head knocked out
    qtbot.waitUntil(lambda: _settled(window, None) and c.result.knocked_a == ((0, 1),),
                    timeout=WAIT_MS)  # fmt: skip
    assert c.view_a.full_title == (
        f"A · head 0.1 knocked out (zero ablation) · {tiny_ckpt.name} · {rollout} · {rocket.name}"
    )
    assert "knocked" not in c.view_b.full_title
    # nothing else in this window says A is intervened: on a 1366 px screen its view's title,
    # shortened from its end, keeps it
    c.diff.setChecked(False)
    c.resize(1366 - FRAME_ROOM[0], 740 - FRAME_ROOM[1])
    qtbot.waitUntil(lambda: c.view_a.title.text() != c.view_a.full_title, timeout=WAIT_MS)
    assert c.view_a.title.text().startswith("A · head 0.1 knocked out (zero ablation) · ")


MODEL = resource_dir() / "models" / DEFAULT_MODEL_NAME  # the shipped ViT: 64 px, a CLS token
SHAPE = resource_dir() / "samples" / "star.png"


def _query_words(path: Path, query: tuple[int, int] | None) -> str:
    """What ``path``'s own kind calls ``query`` on SHAPE: its query row's words."""
    loaded = load_checkpoint(path)
    analysis = loaded.kind.analyze(loaded, SHAPE)
    numbers = loaded.kind.image_numbers(ModelSession(loaded, analysis))
    return numbers.words.query_text(query, numbers.token_geometry)


def test_the_query_is_said_for_each_side_in_its_own_models_words(qtbot, tmp_path: Path) -> None:
    """A (the shipped ViT, with a CLS token) beside B, a ViT without one (its query is the
    mean of patches) and then a Swin (the average pool; a clicked cell a point of its input):
    the query line says each side's query in its own kind's words, not A's for both, B's
    cell the one at the place of A's clicked cell."""
    import json

    import torch
    from swin_helpers import tiny_torchvision_swin

    no_cls = save_checkpoint(
        random_vit(seed=7, image_size=64, class_token=False, global_pool="avg"),
        tmp_path / "no-cls.safetensors",
        class_names=CLASS_NAMES,
    )
    window = _compared(qtbot, tmp_path, MODEL, no_cls, SHAPE)
    c = window.compare
    a_words, b_words = _query_words(MODEL, None), _query_words(no_cls, None)
    assert (a_words, b_words) == ("CLS token", "mean of patches")  # the test can tell them apart
    assert c.query_label.text() == f"query A: {a_words} · B: {b_words}"
    c.set_query((2, 3))
    qtbot.waitUntil(lambda: _settled(window, (2, 3)), timeout=WAIT_MS)
    both = _query_words(MODEL, (2, 3))
    assert both == _query_words(no_cls, (2, 3)) == "patch row 2, col 3 (#19)"
    assert c.query_label.text() == f"query A and B: {both}"  # the same words once

    swin = tmp_path / "swin.pth"
    torch.save(tiny_torchvision_swin().state_dict(), swin)
    swin.with_name(swin.name + ".vitviz.json").write_text(
        json.dumps({"preprocessing": {"image_size": [64, 64]}})
    )
    window.compare_with(swin)
    qtbot.waitUntil(lambda: _settled(window, (2, 3)) and c.result.name_b == swin.name,
                    timeout=WAIT_MS)  # fmt: skip
    # A's cell (2, 3) of 8 px cells, centre (20, 28) px of the 64 px input both see: B's map
    # is of its own cell holding that point (its grid is another), and said so
    loaded = load_checkpoint(swin)
    cell_b = loaded.kind.image_numbers(
        ModelSession(loaded, loaded.kind.analyze(loaded, SHAPE))
    ).token_geometry.cell_pixels
    assert cell_b != 8 and c.result.query_b == (20 // cell_b, 28 // cell_b)
    point = _query_words(swin, c.result.query_b)
    assert point.startswith("point y ") and point != both
    assert c.query_label.text() == f"query A: {both} · B: {point}"
    c.set_query(None)
    qtbot.waitUntil(lambda: _settled(window, None), timeout=WAIT_MS)
    pool = _query_words(swin, None)
    assert pool != a_words and c.query_label.text() == f"query A: {a_words} · B: {pool}"
