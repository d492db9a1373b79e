"""A second look: every colour bar labels both ends of its range in full, legends sit
beside the points, Head statistics' sub-tabs show their names at 1280 × 720, the per-epoch strip
never starts with half a tile, and the head grid offers each head its own colour scale."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pyqtgraph as pg
import pytest
from PIL import Image
from PySide6.QtGui import QFontMetricsF
from test_ui_first_minutes import settle, show_model
from test_ui_window import WAIT_MS, make_settings, new_window, settled
from ui_fit import clipped_tabs, colorbar_problems, legend_problems

from vitviz.imaging.colormaps import scale_ticks
from vitviz.imaging.overlay import scale_each_tile
from vitviz.training.events import EpochEvent, ProbeEvent
from vitviz.ui.canvas import ImageCanvas
from vitviz.ui.head_grid import HeadGrid, build_mosaic
from vitviz.ui.head_grid_panel import GOOD_TILE_PX
from vitviz.ui.main_window import MainWindow


@pytest.fixture
def window(qtbot, tmp_path: Path) -> MainWindow:
    return new_window(qtbot, tmp_path / "settings" / "vitviz.ini")


def show(qtbot, window: MainWindow, checkpoint: Path, image: Path) -> None:
    show_model(qtbot, window, checkpoint, image)
    settle(window)


# -- colour bars ---------------------------------------------------------------------------------
def test_scale_ticks_label_both_ends_and_round_values_between() -> None:
    assert scale_ticks((0.0, 1.0)) == [
        (0.0, "0"),
        (1.0, "1"),
        *(
            (pytest.approx(v), t)
            for v, t in ((0.2, "0.2"), (0.4, "0.4"), (0.6, "0.6"), (0.8, "0.8"))
        ),
    ]
    small = scale_ticks((0.0, 5.3e-05))  # a Swin's tiny map: both ends, not one label
    assert small[:2] == [(0.0, "0"), (5.3e-05, "5.3e-05")]
    assert [t for _, t in small[2:]] == ["2e-05", "4e-05"]
    assert scale_ticks((0.0, 1234.5))[1] == (1234.5, "1234")
    ticks = scale_ticks((-0.37, 0.81))
    assert ticks[:2] == [(-0.37, "-0.37"), (0.81, "0.81")] and (0.0, "0") in ticks
    assert scale_ticks((2.0, 2.0)) == [(2.0, "2")]  # a flat scale: one label
    for levels in ((0.0, 0.0123), (0.3, 0.31), (-5.0, 1e6)):
        values = [v for v, _ in scale_ticks(levels)]
        lo, hi = levels
        step = min(b - a for a, b in zip(sorted(values), sorted(values)[1:], strict=False))
        assert all(lo <= v <= hi for v in values) and len(values) <= 6
        assert step >= (hi - lo) / 12  # no two labels on top of each other


@pytest.mark.parametrize("hi", [1.0, 5.3e-05, 0.0123, 1234.5])
def test_a_map_colour_bar_reads_in_full(qtbot, hi: float) -> None:
    pg.setConfigOptions(imageAxisOrder="row-major")
    canvas = ImageCanvas("map")
    qtbot.addWidget(canvas)
    canvas.resize(420, 260)
    canvas.show()
    qtbot.waitExposed(canvas)
    canvas.set_image(np.zeros((32, 32, 3), np.uint8), (0, 0, 32, 32), (4, 4))
    canvas.set_map(np.linspace(0, hi, 16, dtype=np.float32).reshape(4, 4))
    settle(canvas)
    assert colorbar_problems(canvas.colorbar, canvas) == []


def test_a_view_made_narrower_keeps_its_notice_whole(qtbot) -> None:
    """Words over a map (one line in a wide view) wrap to two when the view narrows (the compare
    window's difference view shown beside them): the notice grows to show both lines."""
    canvas = ImageCanvas("B")
    qtbot.addWidget(canvas)
    canvas.resize(700, 500)
    canvas.show()
    qtbot.waitExposed(canvas)
    canvas.set_image(np.zeros((32, 32, 3), np.uint8), (0, 0, 32, 32), (4, 4))
    canvas.set_message("No map from B: patch (4, 4) is outside the 4×4 grid")
    settle(canvas)
    notice = canvas.notice
    one_line = notice.height()
    canvas.resize(340, 500)
    settle(canvas)
    assert notice.width() < 340
    assert notice.height() >= notice.heightForWidth(notice.width()) > one_line


@pytest.mark.parametrize("size", [(1280, 720), (1600, 900)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_window_colour_bars_legends_and_tabs_read_in_full(
    qtbot, window: MainWindow, tiny_ckpt, photo_files, size
) -> None:
    window.resize(*size)
    show(qtbot, window, tiny_ckpt, photo_files["chelsea"])
    v = window.viewer
    assert colorbar_problems(v.map_view.colorbar, v.map_view) == []
    assert colorbar_problems(v.head_grid.colorbar, v.head_grid) == []
    v.right_tabs.setCurrentWidget(v.stats_panel)
    for key, plot in v.stats.plots.items():
        v.stats.setCurrentWidget(plot)
        settle(window)
        assert legend_problems(plot) == [], key
    assert clipped_tabs(window) == []  # the sub-tabs "Distance" … "Norms" in full
    window.tabs.setCurrentWidget(window.training)
    settle(window)
    for plot in (window.training.loss_plot, window.training.acc_plot):
        assert legend_problems(plot) == []


# -- the per-epoch strip -------------------------------------------------------------------------
def test_probe_strip_shows_whole_tiles_from_its_left_edge(qtbot, window: MainWindow) -> None:
    window.resize(1280, 720)
    tab = window.training
    window.tabs.setCurrentWidget(tab)
    rng = np.random.default_rng(0)
    image = (rng.random((32, 32, 3)) * 255).astype(np.uint8)
    rollout = rng.random((4, 4)).astype(np.float32)
    bar = tab.probe_scroll.horizontalScrollBar()
    for epoch in range(1, 31):
        tab._on_event(ProbeEvent(epoch, image, rollout, rollout, label=1, predicted=epoch % 2))
        settle(window, 4)
        view = tab.probe_scroll.viewport().width()
        seen = []
        for cell in tab.probe_labels:
            x = cell.x() - bar.value()
            if x + cell.width() > 0 and x < view:  # at least partly in view
                seen.append((x, x + cell.width()))
        assert all(a >= 0 and b <= view for a, b in seen), (epoch, seen, view)
        assert tab.probe_labels[-1] is not None and seen[-1][1] > 0  # the newest in view
    # the user scrolled back: the strip stays where it is
    bar.setValue(0)
    tab._on_event(ProbeEvent(31, image, rollout, rollout, label=1, predicted=1))
    settle(window, 4)
    assert bar.value() == 0


def test_training_legends_stay_clear_after_epochs(qtbot, window: MainWindow) -> None:
    tab = window.training
    window.tabs.setCurrentWidget(tab)
    for epoch in range(1, 6):
        tab._on_event(
            EpochEvent(
                epoch=epoch,
                epochs=5,
                train_loss=2.0 / epoch,
                train_acc=0.2 * epoch,
                val_loss=2.1 / epoch,
                val_acc=0.19 * epoch,
                images_per_s=100.0,
                epoch_time_s=1.0,
                eta_s=5.0 - epoch,
                is_best=True,
            )
        )
    settle(window)
    for plot in (tab.loss_plot, tab.acc_plot):
        assert legend_problems(plot) == []
        assert len(plot.getPlotItem().legend.items) >= 2


# -- the per-head colour scale -------------------------------------------------------------------
def test_scale_each_tile_puts_every_tile_on_zero_to_its_max() -> None:
    maps = np.array([[[0.0, 0.002], [0.001, 0.004]], [[0.5, 0.25], [0.0, 1.0]]], np.float32)
    flat = np.full((1, 2, 2), 0.3, np.float32)
    nan = np.array([[[np.nan, 2.0], [1.0, -1.0]]], np.float32)
    np.testing.assert_allclose(scale_each_tile(maps)[0], [[0, 0.5], [0.25, 1.0]])
    np.testing.assert_allclose(scale_each_tile(maps)[1], maps[1])
    np.testing.assert_allclose(scale_each_tile(flat), [[[1.0, 1.0], [1.0, 1.0]]])  # 0 to 0.3
    np.testing.assert_allclose(scale_each_tile(np.zeros((1, 2, 2))), 0.0)  # nothing to scale
    out = scale_each_tile(nan)  # a negative value: from it to the max
    assert np.isnan(out[0, 0, 0])
    np.testing.assert_allclose(out[0].ravel()[1:], [1.0, 2 / 3, 0.0])


def test_head_grid_per_head_scale_is_shown_said_and_remembered(
    qtbot, tmp_path: Path, tiny_ckpt, photo_files
) -> None:
    settings = tmp_path / "s" / "vitviz.ini"
    window = new_window(qtbot, settings)
    window.resize(1280, 720)
    show(qtbot, window, tiny_ckpt, photo_files["chelsea"])
    v = window.viewer
    grid: HeadGrid = v.head_grid
    panel = v.head_panel
    assert panel.scale_name() == "shared" and not grid.per_head
    heads, means = v.maps.head_maps, v.maps.mean_maps
    shared = grid.maps.image.copy()
    np.testing.assert_array_equal(shared, build_mosaic(heads, means, grid.layout))
    panel.scale.setCurrentIndex(panel.scale.findData("per-head"))
    settle(window)
    assert grid.per_head
    want = build_mosaic(scale_each_tile(heads), scale_each_tile(means), grid.layout)
    np.testing.assert_allclose(grid.maps.image, want, equal_nan=True)
    ticks = dict(grid.colorbar.axis._tickLevels[0])
    assert ticks == {0.0: "0", 1.0: "max"}  # no numbers of a shared scale
    assert "per head" in grid.colorbar.axis.labelText
    assert "own maximum" in panel.scale.toolTip()
    assert colorbar_problems(grid.colorbar, grid) == []
    # the value under the pointer is still the attention itself
    layer, head = 0, 1
    centre = grid.tile_center(layer, head)
    value = grid.hover_info(centre)[2]
    assert value in heads[layer, head]
    # a new layer keeps the per-head mosaic; the export follows the grid's scale
    assert window.viewer.export_request()["per_head"] is True
    target = tmp_path / "heads.png"
    window.export_to(target, "heads")
    qtbot.waitUntil(lambda: target.exists() and settled(window), timeout=WAIT_MS)
    with Image.open(target) as png:
        assert png.size[0] > 0
    window.close()
    again = new_window(qtbot, settings)  # remembered
    assert again.viewer.head_panel.scale_name() == "per-head" and again.viewer.head_grid.per_head
    assert make_settings(settings).get("view/head_scale") == "per-head"


@pytest.mark.parametrize("size", [(700, 260), (2200, 800)])
def test_head_grid_column_labels_never_overlap(qtbot, size: tuple[int, int]) -> None:
    """24 heads (a Swin-T's last stage) in a small view: labels thinned (H1, H3, …) so that no
    two touch; in a large view every head is labelled."""
    pg.setConfigOptions(imageAxisOrder="row-major")
    grid = HeadGrid()
    qtbot.addWidget(grid)
    grid.resize(*size)
    grid.show()
    qtbot.waitExposed(grid)
    pixels = np.zeros((56, 56, 3), np.uint8)
    grid.set_layout(12, 24, (7, 7), pixels)
    qtbot.wait(20)  # the re-layout for the widget's size runs on a timer
    shown = [item for items in grid._column_labels.values() for item in items]
    spans = []  # (top, left, right) of each label's text in widget pixels
    for item in shown:
        box = grid.mapFromScene(item.mapRectToScene(item.boundingRect())).boundingRect()
        half = QFontMetricsF(item.textItem.font()).horizontalAdvance(item.toPlainText()) / 2
        spans.append((box.top(), box.center().x() - half, box.center().x() + half))
    spans.sort()
    for (top_a, _, right_a), (top_b, left_b, _) in itertools.pairwise(spans):
        if top_a == top_b:  # the same band's header row
            assert right_a + 2 <= left_b, spans
    if size[0] >= 2000:
        assert len(shown) == 25 * grid.layout.bands  # mean + 24 heads in every band
    else:
        assert len(shown) < 25 * grid.layout.bands


def test_a_big_model_gets_a_taller_grid_unless_the_map_is_zoomed(
    qtbot, window: MainWindow, tiny_ckpt, photo_files, tmp_path: Path
) -> None:
    from conftest import random_vit

    from vitviz.checkpoints import save_checkpoint

    big = random_vit(depth=12, heads=12, dim=48, image_size=56, patch_size=4)  # 14 × 14
    big_ckpt = save_checkpoint(big, tmp_path / "vit12x12.safetensors", class_names=list("abcde"))
    window.resize(1600, 900)
    show(qtbot, window, tiny_ckpt, photo_files["chelsea"])
    v = window.viewer
    small_share = v.left_splitter.sizes()[1] / sum(v.left_splitter.sizes())
    small_tile = v.head_grid.tile_size_px()
    v.map_view.vb.scaleBy((0.5, 0.5))  # the user zoomed in: the views keep their size
    show(qtbot, window, big_ckpt, photo_files["chelsea"])
    assert v.left_splitter.sizes()[1] / sum(v.left_splitter.sizes()) == small_share
    v.map_view.vb.autoRange(padding=0.02)  # fitted again; the next model re-shares
    show(qtbot, window, tiny_ckpt, photo_files["chelsea"])
    show(qtbot, window, big_ckpt, photo_files["chelsea"])
    big_share = v.left_splitter.sizes()[1] / sum(v.left_splitter.sizes())
    assert 0.41 <= small_share <= 0.61 and 0.41 <= big_share <= 0.61
    bar = v.head_panel.height() - v.head_grid.height()
    most = v.head_grid.scale_at_height(0.6 * sum(v.left_splitter.sizes()) - bar)
    assert v.head_grid.scale >= 0.95 * most  # about the largest tiles the most height gives
    # the small model: no more height than large tiles need
    assert small_tile <= 1.1 * GOOD_TILE_PX or small_share < 0.43
