"""The first five minutes of a new user: the window fits a laptop screen and a large
one, every head of a real-size model is readable, each view says what it shows, and the small
things (hover, titles, status tips, export message, statistics) tell the truth."""

from __future__ import annotations

import configparser
import itertools
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QPointF
from PySide6.QtWidgets import QApplication, QScrollArea
from test_ui_window import (
    WAIT_MS,
    click,
    drop,
    new_window,
    select_method,
    settled,
    wait_shown,
)
from ui_fit import clipped_widgets, inside_window

from vitviz.checkpoints import save_checkpoint
from vitviz.core import resources
from vitviz.ui.canvas import flat_value
from vitviz.ui.charts import layer_ticks
from vitviz.ui.head_grid import MEAN, GridLayout, build_mosaic, plan_layout
from vitviz.ui.main_window import MainWindow, first_window_size, plain_text

SIZES = [(1366, 768), (1920, 1080)]
REPO = Path(__file__).resolve().parents[2]


def settle(window: MainWindow, rounds: int = 10) -> None:
    """Let Qt lay out and paint after a resize (the head grid re-lays itself out on a timer)."""
    for _ in range(rounds):
        QApplication.processEvents()


@pytest.fixture
def ckpt_12x12(tmp_path: Path) -> Path:
    """A 12-layer × 12-head ViT (random weights, small width: the layout is what counts)."""
    from conftest import random_vit

    model = random_vit(depth=12, heads=12, dim=48, image_size=56, patch_size=4)  # 14 × 14
    return save_checkpoint(model, tmp_path / "vit12x12.safetensors", class_names=list("abcde"))


@pytest.fixture
def window(qtbot, tmp_path: Path) -> MainWindow:
    return new_window(qtbot, tmp_path / "settings" / "vitviz.ini")


def show_model(qtbot, window: MainWindow, checkpoint: Path, image: Path) -> None:
    drop(window, [image, checkpoint])
    wait_shown(qtbot, window, image.name)


# -- layout at a laptop's and a desktop's size ---------------------------------------------------
def test_plan_layout_wraps_layers_into_bands_when_that_makes_tiles_larger() -> None:
    layout, scale = plan_layout(12, 12, (14, 14), 1300, 400)  # wide and low: two bands
    assert layout.bands == 2 and layout.rows == 6
    one_band = min((1300 - 30) / (13 * 15 - 1), (400 - 18) / (12 * 15 - 1))
    assert scale > one_band  # the chosen banding beats one band
    tall, _ = plan_layout(12, 12, (14, 14), 400, 1300)  # tall and narrow: one band
    assert tall.bands == 1
    # every tile has its own place and cell_at finds it again
    seen = set()
    for layer in range(12):
        for column in range(13):
            x, y = layout.origin(layer, column)
            assert layout.cell_at(x + 7, y + 7) == (layer, column)
            seen.add((x, y))
    assert len(seen) == 12 * 13
    assert layout.cell_at(layout.origin(0, 0)[0] - 1, layout.origin(0, 0)[1] + 3) is None


def test_mosaic_puts_each_map_in_its_tile() -> None:
    rng = np.random.default_rng(0)
    heads = rng.random((5, 3, 2, 3)).astype(np.float32)
    means = rng.random((5, 2, 3)).astype(np.float32)
    layout = GridLayout(5, 3, (2, 3), bands=2, margin=2, header=1, sub=2)
    mosaic = build_mosaic(heads, means, layout)
    assert mosaic.shape == layout.size
    for layer in range(5):
        for column, tile in enumerate([means[layer], *heads[layer]]):
            x, y = layout.origin(layer, column)
            drawn = mosaic[y : y + 4, x : x + 6]  # 2 × 2 cells a patch
            np.testing.assert_array_equal(drawn[::2, ::2], tile)
            np.testing.assert_array_equal(drawn[1::2, 1::2], tile)
    assert np.isnan(mosaic).sum() == mosaic.size - 5 * 4 * 24  # nothing else drawn


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_viewer_fits_the_screen(qtbot, window: MainWindow, ckpt_12x12, photo_files, size) -> None:
    window.resize(*size)
    show_model(qtbot, window, ckpt_12x12, photo_files["chelsea"])
    v = window.viewer
    for name in ("attention", "rollout", "dino-masks", "transformer-attribution"):
        select_method(qtbot, window, name)
        qtbot.waitUntil(lambda: settled(window), timeout=WAIT_MS)
        settle(window)
        assert clipped_widgets(window) == [], name
        # every map setting reachable without scrolling the side panel
        scroll = v.right_tabs.currentWidget()
        assert isinstance(scroll, QScrollArea)
        assert scroll.verticalScrollBar().maximum() == 0, name
        for widget in (v.controls.method, v.controls.colormap, v.controls.opacity):
            assert inside_window(widget, window), name
    grid = v.head_grid
    tile = grid.tile_rect_px(11, 11)
    assert grid.rect().toRectF().contains(tile)  # the last tile is on screen
    if size == (1920, 1080):
        assert min(tile.width(), tile.height()) >= 40, tile
        assert abs(tile.width() - tile.height()) < 1.5  # aspect kept


def test_head_grid_hover_names_layer_head_and_value(
    qtbot, window: MainWindow, ckpt_12x12, photo_files
) -> None:
    window.resize(1920, 1080)
    show_model(qtbot, window, ckpt_12x12, photo_files["chelsea"])
    settle(window)
    v = window.viewer
    grid = v.head_grid
    layout = grid.layout
    x, y = layout.origin(7, 3 + 1)  # layer 7, head 3 (from 0); patch (1, 2) of that tile
    scene = grid.vb.mapViewToScene(QPointF(x + 2.5, y + 1.5))
    with qtbot.waitSignal(grid.cellHovered, timeout=WAIT_MS) as hovered:
        grid.scene().sigMouseMoved.emit(scene)
    layer, head, value = hovered.args[0]
    assert (layer, head) == (7, 3)
    assert value == pytest.approx(float(v.maps.head_maps[7, 3, 1, 2]))
    assert grid.toolTip().startswith("layer 7, head 3: ")
    assert window.hover_label.text() == grid.toolTip()
    # the selected tile's row and column labels stand out
    v.controls.select(layer=7, head=3)
    settle(window)
    marked = {
        item.textItem.toPlainText()
        for item in [*grid._row_labels, *itertools.chain(*grid._column_labels.values())]
        if item.textItem.font().bold()
    }
    assert marked == {"L7", "H3"}


def test_head_grid_zooms_and_fits_again(qtbot, window: MainWindow, ckpt_12x12, photo_files):
    window.resize(1366, 768)
    show_model(qtbot, window, ckpt_12x12, photo_files["chelsea"])
    settle(window)
    grid = window.viewer.head_grid
    fitted = grid.vb.viewRect()
    grid.vb.scaleBy((0.25, 0.25))  # as the wheel does
    assert grid.vb.viewRect().width() < fitted.width() / 2
    grid.fit()
    assert grid.vb.viewRect().width() == pytest.approx(fitted.width(), rel=1e-3)


def test_input_panel_keeps_the_plain_image(qtbot, window: MainWindow, tiny_ckpt, photo_files):
    show_model(qtbot, window, tiny_ckpt, photo_files["chelsea"])
    v = window.viewer
    assert v.map_view.overlay.isVisible()  # the map is drawn on the large view ...
    assert not v.input_view.overlay.isVisible()  # ... and never over the model input
    np.testing.assert_array_equal(v.input_view.image.image, v.image.input_pixels)
    v.controls.opacity.setValue(0)
    v.controls.opacity.setValue(70)
    assert not v.input_view.overlay.isVisible()


# -- what each view says --------------------------------------------------------------------------
def test_titles_name_method_class_query_and_layers(
    qtbot, window: MainWindow, tiny_ckpt, photo_files
) -> None:
    show_model(qtbot, window, tiny_ckpt, photo_files["chelsea"])
    v = window.viewer

    def title() -> str:  # the whole title (a narrow view shows it shortened)
        return v.map_view.full_title

    assert title() == "Attention · layer 0 of 0–1 · mean of heads · query CLS"
    select_method(qtbot, window, "relevance")
    qtbot.waitUntil(lambda: settled(window), timeout=WAIT_MS)
    top = v.image.class_names[v.image.top_class]
    assert title().startswith(f"Relevance (Chefer) · class “{top}” · query CLS")
    assert "layers 0–1" in title()
    click(v.map_view, v.map_view.vb.mapViewToScene(v.map_view.patch_rect(1, 2).center()))
    qtbot.waitUntil(lambda: v.query == (1, 2) and settled(window), timeout=WAIT_MS)
    info = v.controls.methods["relevance"]
    expected = "query patch (1, 2)" if info.queries else "query CLS (fixed)"
    assert expected in title()


def test_flat_map_says_so(qtbot, window: MainWindow, tiny_ckpt, photo_files) -> None:
    assert flat_value(np.full((3, 4), 0.25)) == 0.25
    assert flat_value(np.array([[0.0, 1.0]])) is None
    assert np.isnan(flat_value(np.full((2, 2), np.nan)))
    show_model(qtbot, window, tiny_ckpt, photo_files["chelsea"])
    canvas = window.viewer.map_view
    assert canvas.notice.isHidden()  # a real map: no notice
    canvas.set_map(np.full(window.viewer.image.grid, 0.5, dtype=np.float32))
    assert canvas.notice.isVisible() and "Flat map" in canvas.notice.text()
    assert "0.5" in canvas.notice.text()
    window.viewer.refresh_display()
    assert canvas.notice.isHidden()


def test_hover_readout_follows_a_click(qtbot, window: MainWindow, tiny_ckpt, photo_files) -> None:
    show_model(qtbot, window, tiny_ckpt, photo_files["chelsea"])
    v = window.viewer
    view = v.map_view
    centre = view.vb.mapViewToScene(view.patch_rect(2, 1).center())
    view.scene().sigMouseMoved.emit(centre)
    before = window.hover_label.text()
    assert before.startswith("patch row 2, col 1")
    click(view, centre)  # the query moves here: a new map under the same pointer
    qtbot.waitUntil(lambda: v.query == (2, 1) and settled(window), timeout=WAIT_MS)
    values, _ = v.current_map()
    value = float(values[2, 1])
    assert (
        window.hover_label.text()
        == f"patch row 2, col 1, index {2 * v.image.grid[1] + 1}, value {value:.4g}"
    )


def test_head_statistics_read_in_units(qtbot, window: MainWindow, tiny_ckpt, photo_files) -> None:
    assert layer_ticks(12) == [(i, str(i)) for i in range(12)]
    assert [t for t, _ in layer_ticks(40)][-1] == 39 and len(layer_ticks(40)) <= 25
    show_model(qtbot, window, tiny_ckpt, photo_files["chelsea"])
    stats = window.viewer.stats
    prefix = stats.plots["prefix"]
    assert "%" in prefix.getAxis("left").labelText + prefix.getAxis("left").labelUnits
    shown = prefix.getPlotItem().listDataItems()[0].getData()[1]
    np.testing.assert_allclose(shown, 100 * window.viewer.image.prefix_share.reshape(-1), rtol=1e-6)
    assert stats.plots["distance"].getAxis("left").labelUnits == "px"
    assert stats.plots["entropy"].getAxis("left").labelUnits == "nats"
    ticks = stats.plots["distance"].getAxis("bottom")._tickLevels[0]
    assert [t for t, _ in ticks] == [0, 1]  # layers counted from 0
    for key, plot in stats.plots.items():
        legend = stats.legends[key]
        assert len(legend.items) == len(plot.getPlotItem().listDataItems()) >= 1, key


# -- small feedback ----------------------------------------------------------------------------
def test_status_tips_have_no_mnemonic_marks(window: MainWindow) -> None:
    assert plain_text("Open &image…") == "Open image…"
    assert plain_text("Fish && chips") == "Fish & chips"
    tips = [a.statusTip() for a in window.findChildren(type(window.act_open_image))]
    assert "Open image…" in tips
    assert tips and not [t for t in tips if re.search(r"&\w", t)], tips


def test_export_says_where_and_links_the_folder(
    qtbot, window: MainWindow, tiny_ckpt, photo_files, tmp_path: Path, monkeypatch
) -> None:
    show_model(qtbot, window, tiny_ckpt, photo_files["chelsea"])
    target = tmp_path / "out" / "view.png"
    target.parent.mkdir()
    window.export_to(target, "view")
    qtbot.waitUntil(
        lambda: target.exists() and "Saved" in window.message_bar.text(), timeout=WAIT_MS
    )
    bar = window.message_bar
    assert bar.text() == f"Saved view.png in {target.parent}"
    opened = []
    monkeypatch.setattr("vitviz.ui.errors.QDesktopServices.openUrl", lambda url: opened.append(url))
    bar.label.linkActivated.emit("folder")
    assert [u.toLocalFile() for u in opened] == [str(target.parent)]


def test_first_window_fits_the_screen_then_keeps_its_place(qtbot, tmp_path: Path) -> None:
    settings = tmp_path / "s" / "vitviz.ini"
    window = new_window(qtbot, settings)
    free = window.screen().availableGeometry()
    assert window.width() <= free.width() and window.height() <= free.height()
    assert (window.width(), window.height()) == first_window_size(free.width(), free.height())
    window.resize(760, 600)
    window.close()
    again = new_window(qtbot, settings)
    assert abs(again.width() - 760) <= 4 and abs(again.height() - 600) <= 4  # (frame rounding)


def test_first_window_uses_most_of_a_large_screen_and_fits_a_small_one() -> None:
    assert first_window_size(2560, 1400) == (2253, 1232)  # 88 % each way, not 1400 × 900
    assert first_window_size(1920, 1040) == (1690, 915)
    assert first_window_size(1600, 860) == (1408, 812)  # at least 1400 × 900, cut to fit
    assert first_window_size(1280, 680) == (1264, 632)
    assert first_window_size(800, 600) == (784, 552)


# -- the app started on an image alone -------------------------------------------------------------
def test_app_on_an_image_alone_predicts_with_the_shipped_model(tmp_path: Path, photo_files):
    shipped = resources.default_model_path()
    assert shipped is not None
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "VITVIZ_TIMING": "1", "QT_QPA_PLATFORM": "offscreen"}
    env.pop("XDG_CONFIG_HOME", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-m", "vitviz", str(photo_files["rocket"]), "--quit-after-ms", "200"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    report = f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert proc.returncode == 0, report
    assert any(line.startswith("first-prediction") for line in proc.stdout.splitlines()), report
    configs = list((home / ".config").rglob("*.conf"))
    assert configs, report
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(configs[0])
    recent = " ".join(v for s in parser.sections() for v in parser[s].values())
    assert shipped.name in recent, recent


def test_keyboard_focus_stays_usable_after_resizes(qtbot, window, tiny_ckpt, photo_files) -> None:
    """Re-laying out the head grid on resize keeps the selection and the click target."""
    show_model(qtbot, window, tiny_ckpt, photo_files["chelsea"])
    v = window.viewer
    v.controls.select(layer=1, head=0)
    for size in SIZES:
        window.resize(*size)
        settle(window)
        grid = v.head_grid
        selected = grid.selection.rect()
        x, y = grid.layout.origin(1, 1)
        assert (selected.x(), selected.y()) == (x, y)
        click(grid, grid.tile_center(0, MEAN))
        assert (v.controls.selected_layer(), v.controls.selected_head()) == (0, MEAN)
        v.controls.select(layer=1, head=0)


def test_wheel_over_the_explain_panel_leaves_its_values(
    qtbot, window: MainWindow, tiny_ckpt, photo_files
) -> None:
    from ui_fit import turn_wheel

    show_model(qtbot, window, tiny_ckpt, photo_files["chelsea"])
    select_method(qtbot, window, "rollout")
    qtbot.waitUntil(lambda: settled(window), timeout=WAIT_MS)
    ctl = window.viewer.controls
    fusion = ctl.param_panel.widgets["fusion"]  # built after the window: guarded as well
    for widget in (ctl.head, ctl.colormap, ctl.layer, ctl.opacity, fusion):
        widget.clearFocus()
        before = widget.currentIndex() if hasattr(widget, "currentIndex") else widget.value()
        turn_wheel(widget, -1)
        after = widget.currentIndex() if hasattr(widget, "currentIndex") else widget.value()
        assert after == before, widget
    ctl.head.setFocus()
    qtbot.waitUntil(ctl.head.hasFocus, timeout=WAIT_MS)
    before = ctl.head.currentIndex()
    turn_wheel(ctl.head, -1)  # focused: the wheel is the control's
    assert ctl.head.currentIndex() != before
