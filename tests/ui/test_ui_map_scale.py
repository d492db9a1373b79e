"""The large map's scale (vitviz.ui.view_state.map_scale) and the head grid's tiles: a tile
click shows that head large, whatever method was shown; a patch query's own cell doesn't set
the scale of its map (it stays outlined, and the view says so); a nearly uniform map spans its
own range, with that range on the colour bar and a line saying so, for every method."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import CLASS_NAMES, random_vit
from test_ui_window import WAIT_MS, click, drop, overlay, settled, wait_shown
from window_watch import watched_window

from vitviz.checkpoints import save_checkpoint
from vitviz.imaging.colormaps import tick_text
from vitviz.ui.main_window import MainWindow
from vitviz.ui.view_state import NEARLY_UNIFORM, map_scale


@pytest.fixture
def window(qtbot, tmp_path: Path):
    yield from watched_window(qtbot, tmp_path)


def show(qtbot, window: MainWindow, model, path: Path, image: Path) -> None:
    ckpt = save_checkpoint(model, path, class_names=CLASS_NAMES)
    drop(window, [image, ckpt])
    wait_shown(qtbot, window, image.name)


def pick(qtbot, window: MainWindow, name: str) -> None:
    window.viewer.controls.select_method(name)
    qtbot.waitUntil(
        lambda: settled(window) and window.viewer.maps.params.method == name, timeout=WAIT_MS
    )


def levels(window: MainWindow) -> tuple[float, float]:
    lo, hi = window.viewer.map_view.overlay.getLevels()
    return float(lo), float(hi)


def notice(window: MainWindow) -> str:
    label = window.viewer.map_view.notice
    return "" if label.isHidden() else label.text()


def test_tile_click_shows_that_head_large(qtbot, window, tmp_path: Path, photo_files) -> None:
    show(qtbot, window, random_vit(), tmp_path / "vit.safetensors", photo_files["chelsea"])
    v = window.viewer
    pick(qtbot, window, "rollout")
    grid = v.head_grid
    click(grid, grid.tile_center(1, 0))
    qtbot.waitUntil(lambda: settled(window), timeout=WAIT_MS)
    assert v.controls.method_name() == "attention"
    assert (v.controls.selected_layer(), v.controls.selected_head()) == (1, 0)
    np.testing.assert_array_equal(overlay(window), v.maps.head_maps[1, 0])
    assert v.map_view.full_title.startswith(v.layers.attention_title(v.maps, 1, 0, None)[:8])


def test_a_patch_query_does_not_set_its_maps_scale(
    qtbot, window, tmp_path: Path, photo_files
) -> None:
    show(qtbot, window, random_vit(), tmp_path / "vit.safetensors", photo_files["chelsea"])
    v = window.viewer
    pick(qtbot, window, "relevance")
    patch = (1, 2)
    click(v.map_view, v.map_view.vb.mapViewToScene(v.map_view.patch_rect(*patch).center()))
    qtbot.waitUntil(lambda: settled(window) and v.maps.params.query == patch, timeout=WAIT_MS)
    values = overlay(window)
    rest = values.copy()
    rest[patch] = np.nan
    assert values[patch] > np.nanmax(rest)  # the identity term of its own row
    lo, hi = levels(window)
    assert hi == pytest.approx(np.nanmax(rest)) and lo == pytest.approx(np.nanmin(rest))
    assert "query's own patch" in notice(window)
    assert v.map_view.query_box.isVisible()  # marked, as the query is


def test_nearly_uniform_maps_span_their_range_for_every_method(
    qtbot, window, tmp_path: Path, photo_files
) -> None:
    """A model whose attention is nearly uniform (its qkv weights shrunk): every method's map
    that spreads less than NEARLY_UNIFORM of its largest value is drawn over its own range,
    with both ends on the colour bar and a line that says so."""
    model = random_vit(seed=2)
    with torch.no_grad():
        for block in model.blocks:
            block.attn.qkv.weight.mul_(0.05)
    show(qtbot, window, model, tmp_path / "weak.safetensors", photo_files["chelsea"])
    v = window.viewer
    uniform = []
    for name in v.controls.methods:
        if name in v.image.unavailable:
            continue
        pick(qtbot, window, name)
        values = overlay(window)
        finite = values[np.isfinite(values)]
        lo, hi = float(finite.min()), float(finite.max())
        if not hi > lo:
            continue  # flat: said so by the canvas
        if hi - lo < NEARLY_UNIFORM * max(abs(lo), abs(hi)):
            uniform.append(name)
            assert levels(window) == pytest.approx((lo, hi)), name
            ticks = [text for _, text in v.map_view.colorbar._vitviz_scale[1]]
            assert tick_text(lo) in ticks and tick_text(hi) in ticks, (name, ticks)
            assert "Nearly uniform" in notice(window), name
        else:
            assert "Nearly uniform" not in notice(window), name
    assert "rollout" in uniform and "attention" in uniform


def test_map_scale_rules() -> None:
    flat_ish = np.full((4, 4), 0.95)
    flat_ish[0, 0] = 1.0
    scale = map_scale(flat_ish, (0.0, 1.0))
    assert scale.levels == (0.95, 1.0) and "Nearly uniform" in scale.note
    spread = np.linspace(0, 1, 16).reshape(4, 4)
    assert map_scale(spread, (0.0, 1.0)) == map_scale(spread, (0.0, 1.0))
    assert map_scale(spread, (0.0, 1.0)).levels == (0.0, 1.0)
    assert map_scale(spread, (0.0, 1.0)).note is None
    peaked = spread * 0.01
    peaked[2, 3] = 1.0
    scale = map_scale(peaked, (0.0, 1.0), query_cell=(2, 3))
    rest = np.delete(peaked.reshape(-1), 11)
    assert scale.levels == pytest.approx((rest.min(), rest.max()))
    assert "query's own patch" in scale.note
    # a query cell that isn't the largest leaves the scale as it was
    assert map_scale(spread, (0.0, 1.0), query_cell=(0, 0)).levels == (0.0, 1.0)
