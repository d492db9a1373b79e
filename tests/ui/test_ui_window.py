"""The real window, driven as a user would: drops, clicks, keys, the clipboard, export, settings.

Every test builds ``MainWindow`` with isolated settings, sends real Qt events (QDropEvent,
mouse press/release on the graphics views' viewports, key clicks) and compares what is on
screen with ``analyze()`` run on the same image and checkpoint in the test itself.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pyqtgraph as pg
import pytest
import torch
from PIL import Image
from PySide6.QtCore import (
    QMimeData,
    QPoint,
    QPointF,
    QRectF,
    QSettings,
    Qt,
    QUrl,
)
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QImage
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication

from vitviz.blocks import create_model
from vitviz.checkpoints import load_checkpoint, save_checkpoint
from vitviz.core import resources
from vitviz.explain.faithfulness import evaluate_methods
from vitviz.explain.localisation import mask_grid_for
from vitviz.explain.methods import Method, method_names, register_method, unregister_method
from vitviz.explain.params import Parameter
from vitviz.kinds.vit.analysis import Analysis
from vitviz.pipeline import export as ex
from vitviz.pipeline.analysis import analyze
from vitviz.ui.controls import MEAN
from vitviz.ui.main_window import MainWindow, model_line
from vitviz.ui.paint_counter import PaintCounter
from vitviz.ui.settings import AppSettings

ATOL = 1e-6
WAIT_MS = 20_000


# -- fixtures and helpers --------------------------------------------------------------------------
def make_settings(path: Path) -> AppSettings:
    return AppSettings(QSettings(str(path), QSettings.Format.IniFormat))


@pytest.fixture
def settings_path(tmp_path: Path) -> Path:
    return tmp_path / "settings" / "vitviz.ini"


def new_window(qtbot, settings_path: Path) -> MainWindow:
    pg.setConfigOptions(imageAxisOrder="row-major", antialias=True)  # as vitviz.app.main does
    window = MainWindow(make_settings(settings_path))
    qtbot.addWidget(window)  # closed (engine stopped) at teardown
    window.show()
    qtbot.waitExposed(window)
    window.start([])
    return window


@pytest.fixture
def window(qtbot, settings_path: Path) -> MainWindow:
    w = new_window(qtbot, settings_path)
    bugs: list[tuple[str, str]] = []
    w.notifier.bugReported.connect(lambda summary, details: bugs.append((summary, details)))
    yield w
    assert not bugs, f"the bug dialog was shown: {bugs}"


def drop(window: MainWindow, paths: list[Path]) -> None:
    """A real drag enter + drop of file URLs on the window."""
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    centre = window.rect().center()
    enter = QDragEnterEvent(
        centre,  # QPoint: the drag-enter constructor takes no QPointF on PySide6 < 6.12
        Qt.DropAction.CopyAction,
        mime,
        Qt.MouseButton.NoButton,
        Qt.KeyboardModifier.NoModifier,
    )
    QApplication.sendEvent(window, enter)
    assert enter.isAccepted()
    event = QDropEvent(
        QPointF(centre),
        Qt.DropAction.CopyAction,
        mime,
        Qt.MouseButton.NoButton,
        Qt.KeyboardModifier.NoModifier,
    )
    QApplication.sendEvent(window, event)
    assert event.isAccepted()


def settled(window: MainWindow) -> bool:
    """Engine idle and the maps on screen are those of the current settings."""
    v = window.viewer
    return (
        not window.client.is_busy()
        and v.image is not None
        and v.maps is not None
        and v.maps.params == v.controls.params(v.query, v.target_class)
    )


def select_method(qtbot, window: MainWindow, name: str) -> None:
    """Pick a method from the window's list once the method table has arrived."""
    ctl = window.viewer.controls
    qtbot.waitUntil(lambda: ctl.method.findData(name) >= 0, timeout=WAIT_MS)
    ctl.method.setCurrentIndex(ctl.method.findData(name))


def wait_shown(qtbot, window: MainWindow, label: str) -> None:
    qtbot.waitUntil(lambda: settled(window) and window.viewer.image.label == label, timeout=WAIT_MS)


def click(widget: pg.GraphicsView, scene_pos: QPointF) -> None:
    """A real left press + release on the view's viewport at a scene position."""
    pos: QPoint = widget.mapFromScene(scene_pos)
    assert widget.viewport().rect().contains(pos), f"{pos} is outside the view"
    QTest.mouseClick(
        widget.viewport(), Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, pos
    )


def overlay(window: MainWindow) -> np.ndarray:
    return np.asarray(window.viewer.map_view.overlay.image)


def write_image(path: Path, seed: int, size: tuple[int, int] = (48, 40)) -> Path:
    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(path)
    return path


@pytest.fixture
def shown(qtbot, window: MainWindow, tiny_ckpt: Path, photo_files) -> tuple[MainWindow, Analysis]:
    """The window with chelsea and the tiny checkpoint dropped on it, and analyze()'s answer."""
    image = photo_files["chelsea"]
    drop(window, [image, tiny_ckpt])
    wait_shown(qtbot, window, image.name)
    return window, analyze(load_checkpoint(tiny_ckpt), image)


# -- drop, predictions and maps --------------------------------------------------------------------
def test_drop_shows_what_analyze_computes(qtbot, shown) -> None:
    window, ref = shown
    v = window.viewer
    chart = v.predictions
    top = ref.top_k(5)
    assert chart.indices == [p.index for p in top]
    assert chart.labels == [p.name for p in top]
    np.testing.assert_allclose(chart.probs, [p.probability for p in top], atol=ATOL)
    assert window.model is not None and window.model.name == "tiny.safetensors"
    np.testing.assert_array_equal(v.input_view.image.image, ref.pixels)

    # Default: layer 1, mean of heads, CLS query.
    np.testing.assert_allclose(overlay(window), ref.attention_maps(0).numpy().mean(0), atol=ATOL)
    # The head grid's mosaic holds every layer and head on one scale.
    all_maps = ref.all_attention_maps().numpy()
    lo, hi = v.maps.levels  # from 0 to a round number just above the largest value
    assert lo == 0.0 and all_maps.max() <= hi <= 1.25 * all_maps.max() + ATOL

    v.controls.select(layer=1, head=1)
    head_map = ref.attention_maps(1)[1].numpy()
    np.testing.assert_allclose(overlay(window), head_map, atol=ATOL)
    # colour scales: the large view's follows its map, the grid's is shared by all tiles
    lo, hi = v.map_view.colorbar.levels()
    assert lo == 0.0 and head_map.max() <= hi <= 1.25 * head_map.max() + ATOL
    assert v.head_grid.colorbar.levels() == pytest.approx(v.maps.levels)

    select_method(qtbot, window, "rollout")
    qtbot.waitUntil(lambda: settled(window), timeout=WAIT_MS)
    np.testing.assert_allclose(overlay(window), ref.rollout().numpy(), atol=ATOL)
    np.testing.assert_allclose(v.maps.method_map, ref.rollout().numpy(), atol=ATOL)


def test_image_alone_is_analysed_with_the_shipped_model_until_a_checkpoint_comes(
    qtbot, window: MainWindow, tiny_ckpt: Path, photo_files
) -> None:
    image = photo_files["coffee"]
    shipped = resources.default_model_path()
    assert shipped is not None
    drop(window, [image])  # no model yet: the shipped one, and one line saying so
    wait_shown(qtbot, window, image.name)
    assert window.model is not None and window.model.path == shipped
    said = window.message_bar.text()
    assert shipped.name in said and "Open checkpoint" in said, said
    ref = analyze(load_checkpoint(shipped), image)
    np.testing.assert_allclose(window.viewer.image.probs, ref.probs.numpy(), atol=ATOL)

    drop(window, [tiny_ckpt])  # the checkpoint dropped next takes over, on the same image
    qtbot.waitUntil(lambda: window.model.path == tiny_ckpt, timeout=WAIT_MS)
    wait_shown(qtbot, window, image.name)
    ref = analyze(load_checkpoint(tiny_ckpt), image)
    np.testing.assert_array_equal(window.viewer.input_view.image.image, ref.pixels)
    np.testing.assert_allclose(window.viewer.image.probs, ref.probs.numpy(), atol=ATOL)


def test_image_alone_takes_the_model_used_last(
    qtbot, settings_path: Path, tiny_ckpt: Path, photo_files
) -> None:
    make_settings(settings_path).add_recent("checkpoints", tiny_ckpt)
    window = new_window(qtbot, settings_path)
    image = photo_files["rocket"]
    window.open_paths([image])
    wait_shown(qtbot, window, image.name)
    assert window.model.path == tiny_ckpt
    assert "the model used last" in window.message_bar.text()


# -- clicks ----------------------------------------------------------------------------------------
def test_click_head_thumbnail_selects_layer_and_head(qtbot, shown) -> None:
    window, ref = shown
    v = window.viewer
    grid = v.head_grid
    for layer, head in ((1, 0), (0, 1), (1, MEAN)):
        click(grid, grid.tile_center(layer, head))
        assert (v.controls.selected_layer(), v.controls.selected_head()) == (layer, head)
        maps = ref.attention_maps(layer).numpy()
        expected = maps.mean(0) if head == MEAN else maps[head]
        np.testing.assert_allclose(overlay(window), expected, atol=ATOL)
        # the selection frame sits on the clicked tile
        assert grid.selection.rect().contains(grid.vb.mapSceneToView(grid.tile_center(layer, head)))


def test_click_patch_makes_it_the_query(qtbot, shown) -> None:
    window, ref = shown
    v = window.viewer
    v.controls.select(layer=1, head=MEAN)
    for view, patch in ((v.input_view, (2, 1)), (v.map_view, (0, 3))):
        centre = view.vb.mapViewToScene(view.patch_rect(*patch).center())
        QTest.mouseMove(view.viewport(), view.mapFromScene(centre))
        qtbot.waitUntil(
            lambda p=patch: window.hover_label.text().startswith(f"patch row {p[0]}, col {p[1]}")
        )
        click(view, centre)
        assert v.query == patch
        qtbot.waitUntil(lambda: settled(window), timeout=WAIT_MS)
        assert v.maps.params.query == patch
        np.testing.assert_allclose(
            v.maps.head_maps, ref.all_attention_maps(patch).numpy(), atol=ATOL
        )
        np.testing.assert_allclose(
            overlay(window), ref.attention_maps(1, patch=patch).numpy().mean(0), atol=ATOL
        )
        assert v.input_view.query_box.isVisible()
        assert f"row {patch[0]}, col {patch[1]}" in v.controls.query_label.text()
    v.controls.query_reset.click()
    qtbot.waitUntil(lambda: settled(window), timeout=WAIT_MS)
    assert v.query is None and v.maps.params.query is None
    np.testing.assert_allclose(overlay(window), ref.attention_maps(1).numpy().mean(0), atol=ATOL)


def test_query_change_paints_each_changed_view_once(qtbot, shown) -> None:
    """A new query repaints the input, the map (title included) and the head grid once each,
    and leaves the predictions alone (a transparent title made the map paint twice)."""
    window, _ = shown
    v = window.viewer
    views = {
        "input": v.input_view,
        "map": v.map_view,
        "heads": v.head_grid,
        "predictions": v.predictions,
    }
    counter = PaintCounter()
    for view in views.values():
        view.viewport().installEventFilter(counter)

    def quiet() -> bool:  # 50 ms without a paint: the results' first paints are all done
        counter.counts.clear()
        qtbot.wait(50)
        return not counter.counts

    for patch in ((1, 2), (3, 0), (0, 3)):
        title = v.map_view.full_title
        qtbot.waitUntil(quiet, timeout=WAIT_MS)
        counter.counts.clear()
        v.set_query(patch)
        qtbot.waitUntil(lambda p=patch: v.maps is not None and v.maps.params.query == p)
        for _ in range(3):
            QApplication.processEvents()
        assert v.map_view.full_title != title
        painted = {name: counter.counts.get(view.viewport(), 0) for name, view in views.items()}
        assert painted == {"input": 1, "map": 1, "heads": 1, "predictions": 0}


def test_patch_grid_lines_bound_every_patch(shown) -> None:
    window, ref = shown
    for view in (window.viewer.input_view, window.viewer.map_view):
        gh, gw = ref.grid
        path = view.grid_lines.path()
        assert path.elementCount() == 2 * ((gh + 1) + (gw + 1))  # one move + one line each
        left, top, right, bottom = view.region
        assert path.boundingRect() == QRectF(left, top, right - left, bottom - top)
        xs = {path.elementAt(i).x for i in range(0, 2 * (gw + 1), 2)}
        assert sorted(xs) == pytest.approx(list(np.linspace(left, right, gw + 1)))


def test_click_prediction_bar_explains_that_class(qtbot, shown) -> None:
    window, ref = shown
    v = window.viewer
    select_method(qtbot, window, "relevance")
    qtbot.waitUntil(lambda: settled(window), timeout=WAIT_MS)
    np.testing.assert_allclose(overlay(window), ref.relevance().numpy(), atol=1e-5)

    chart = v.predictions
    row = 2
    wanted = chart.indices[row]
    assert wanted != ref.top_class
    with qtbot.waitSignal(chart.classClicked) as blocker:
        click(chart, chart.getPlotItem().vb.mapViewToScene(QPointF(0.5, row)))
    assert blocker.args == [wanted]
    assert v.target_class == wanted
    assert chart.selected == wanted
    assert v.controls.class_label.text() == ref.class_names[wanted]
    qtbot.waitUntil(lambda: settled(window), timeout=WAIT_MS)
    assert v.maps.target_class == wanted
    expected = ref.relevance(target_class=wanted).numpy()
    assert not np.allclose(expected, ref.relevance().numpy(), atol=1e-3)
    np.testing.assert_allclose(overlay(window), expected, atol=1e-5)


# -- many drops, bad files -------------------------------------------------------------------------
def test_fifty_quick_drops_show_the_last(qtbot, window: MainWindow, tiny_ckpt: Path, tmp_path):
    drop(window, [tiny_ckpt])
    qtbot.waitUntil(lambda: window.model is not None, timeout=WAIT_MS)
    paths = [write_image(tmp_path / f"drop{i:02d}.png", seed=i) for i in range(50)]
    for i, path in enumerate(paths):
        drop(window, [path])
        if i % 3 == 0:
            QApplication.processEvents()  # let some results arrive in between
    wait_shown(qtbot, window, paths[-1].name)
    qtbot.wait(50)  # anything still queued would land now
    assert window.viewer.image.label == paths[-1].name
    ref = analyze(load_checkpoint(tiny_ckpt), paths[-1])
    np.testing.assert_array_equal(window.viewer.input_view.image.image, ref.pixels)
    np.testing.assert_array_equal(window.viewer.map_view.image.image, np.asarray(ref.source))
    np.testing.assert_allclose(overlay(window), ref.attention_maps(0).numpy().mean(0), atol=ATOL)
    assert window.hover_label.text().startswith(paths[-1].name)
    assert window.notifier.dialog is None


def test_corrupt_image_and_checkpoint_leave_the_state_alone(
    qtbot, shown, tmp_path: Path, photo_files
) -> None:
    window, ref = shown
    v = window.viewer
    image_before, maps_before, model_before = v.image, v.maps, window.model
    probs_before = list(v.predictions.probs)

    broken = tmp_path / "broken.png"
    broken.write_bytes(photo_files["chelsea"].read_bytes()[:200])  # a truncated PNG
    with qtbot.waitSignal(window.notifier.userMessage, timeout=WAIT_MS) as blocker:
        drop(window, [broken])
    assert "broken.png" in blocker.args[0]
    assert "broken.png" in window.message_bar.text()
    qtbot.waitUntil(lambda: not window.client.is_busy(), timeout=WAIT_MS)
    assert v.image is image_before and v.maps is maps_before
    assert v.predictions.probs == probs_before

    bad_ckpt = tmp_path / "garbage.safetensors"
    bad_ckpt.write_bytes(np.random.default_rng(0).bytes(4096))
    with qtbot.waitSignal(window.notifier.userMessage, timeout=WAIT_MS) as blocker:
        drop(window, [bad_ckpt])
    assert "garbage.safetensors" in window.message_bar.text()
    qtbot.waitUntil(lambda: not window.client.is_busy(), timeout=WAIT_MS)
    assert window.model is model_before
    assert window.model_label.text() == model_line(model_before)  # its shape too, as before
    assert window.model_label.text().startswith("tiny.safetensors")
    assert v.image is image_before and v.maps is maps_before

    # Still working with the same model: step the head, then another image.
    v.controls.step_head(1)
    np.testing.assert_allclose(overlay(window), ref.attention_maps(0)[0].numpy(), atol=ATOL)
    drop(window, [photo_files["rocket"]])
    wait_shown(qtbot, window, "rocket.jpg")
    assert window.model is model_before


def test_switch_model_while_clicking(qtbot, shown, tmp_path: Path, photo_files) -> None:
    """Clicks while a new checkpoint loads: no spurious message, then the new model's maps."""
    window, _ = shown
    v = window.viewer
    messages: list[str] = []
    window.notifier.userMessage.connect(messages.append)
    v.controls.select(layer=1, head=1)
    other = save_checkpoint(
        create_model("cifar10-tutorial").eval(),
        tmp_path / "other.safetensors",
        class_names=[f"k{i}" for i in range(10)],
    )
    drop(window, [other])
    v.set_query((1, 2))  # the user keeps clicking while it loads
    v.controls.step_head(1)
    qtbot.waitUntil(
        lambda: settled(window) and v.image.num_heads == 4 and v.image.num_layers == 4,
        timeout=WAIT_MS,
    )
    assert messages == []
    assert window.model.name == "other.safetensors"
    ref = analyze(load_checkpoint(other), photo_files["chelsea"])
    layer, head = v.controls.selected_layer(), v.controls.selected_head()
    maps = ref.attention_maps(layer, patch=(1, 2)).numpy()
    np.testing.assert_allclose(
        overlay(window), maps.mean(0) if head == MEAN else maps[head], atol=ATOL
    )
    v.controls.select(layer=3, head=3)  # exists in this model only
    np.testing.assert_allclose(
        overlay(window), ref.attention_maps(3, patch=(1, 2))[3].numpy(), atol=ATOL
    )


# -- export ----------------------------------------------------------------------------------------
def _export(qtbot, window: MainWindow, path: Path, what: str) -> None:
    with qtbot.waitSignal(
        window.client.resultReady, timeout=WAIT_MS, check_params_cb=lambda ch, _r: ch == "export"
    ):
        window.export_to(path, what)
    assert path.name in window.message_bar.text()


def test_export_png_and_npz(qtbot, shown, tmp_path: Path, photo_files) -> None:
    window, ref = shown
    v = window.viewer
    _export(qtbot, window, tmp_path / "view.png", "view")
    with Image.open(photo_files["chelsea"]) as source:
        source_size = source.size
    with Image.open(tmp_path / "view.png") as png:
        assert png.format == "PNG"
        assert png.size == source_size
    _export(qtbot, window, tmp_path / "heads.png", "heads")
    with Image.open(tmp_path / "heads.png") as png:
        assert png.format == "PNG" and png.size[0] > 0

    for target in (None, 3):
        v.set_target_class(target)
        qtbot.waitUntil(lambda: settled(window), timeout=WAIT_MS)
        ours = tmp_path / f"window_{target}.npz"
        _export(qtbot, window, ours, "npz")
        cli = ex.write_npz(
            ref,
            ex.compute_maps(ref, ex.MapSettings(target_class=target)),
            tmp_path / f"cli_{target}.npz",
        )
        with np.load(ours) as a, np.load(cli) as b:
            assert list(a.keys()) == list(b.keys()) == list(ex.NPZ_KEYS)
            for key in ex.NPZ_KEYS:
                assert a[key].dtype == b[key].dtype, key
                if a[key].dtype.kind == "U":
                    np.testing.assert_array_equal(a[key], b[key])
                else:
                    np.testing.assert_allclose(a[key], b[key], atol=1e-5, err_msg=key)
            assert int(a["target_class"]) == (ref.top_class if target is None else target)


# -- keyboard, errors ------------------------------------------------------------------------------
def test_keyboard_steps_head_and_layer(qtbot, shown) -> None:
    window, ref = shown
    v = window.viewer
    window.activateWindow()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is window)
    v.map_view.setFocus()
    assert (v.controls.selected_layer(), v.controls.selected_head()) == (0, MEAN)
    QTest.keyClick(v.map_view, Qt.Key.Key_Right)
    assert v.controls.selected_head() == 0
    QTest.keyClick(v.map_view, Qt.Key.Key_Right)
    assert v.controls.selected_head() == 1
    QTest.keyClick(v.map_view, Qt.Key.Key_PageDown)
    assert v.controls.selected_layer() == 1
    np.testing.assert_allclose(overlay(window), ref.attention_maps(1)[1].numpy(), atol=ATOL)
    QTest.keyClick(v.map_view, Qt.Key.Key_Left)
    QTest.keyClick(v.map_view, Qt.Key.Key_PageUp)
    assert (v.controls.selected_layer(), v.controls.selected_head()) == (0, 0)
    QTest.keyClick(v.map_view, Qt.Key.Key_PageUp)  # stays at the first layer
    assert v.controls.selected_layer() == 0


@pytest.mark.qt_no_exception_capture
def test_exception_in_a_slot_opens_the_dialog_and_the_window_keeps_working(
    qtbot, shown, monkeypatch
) -> None:
    window, ref = shown
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # restored after the test
    window.notifier.install_excepthook()
    reported: list[tuple[str, str]] = []
    window.notifier.bugReported.disconnect()
    window.notifier.bugReported.connect(lambda s, d: reported.append((s, d)))

    def broken_slot() -> None:
        raise RuntimeError("boom in a slot")

    v = window.viewer
    v.controls.displayChanged.connect(broken_slot)
    v.controls.opacity.setValue(30)  # a real signal -> our slot raises
    qtbot.waitUntil(lambda: bool(reported))
    dialog = window.notifier.dialog
    assert dialog is not None and dialog.isVisible()
    assert not dialog.isModal()
    assert "boom in a slot" in dialog.text()
    assert "broken_slot" in dialog.detailedText() and "Traceback" in dialog.detailedText()
    v.controls.displayChanged.disconnect(broken_slot)
    dialog.close()

    # A job that fails in the engine thread takes the same path.
    def broken_job(state) -> None:
        raise ZeroDivisionError("engine bug")

    window.client.submit("export", broken_job)
    qtbot.waitUntil(lambda: len(reported) == 2, timeout=WAIT_MS)
    assert dialog.isVisible() and "engine bug" in dialog.detailedText()
    dialog.close()

    # Still usable: keys, clicks, new maps.
    v.controls.select(layer=1, head=0)
    np.testing.assert_allclose(overlay(window), ref.attention_maps(1)[0].numpy(), atol=ATOL)
    v.set_query((1, 1))
    qtbot.waitUntil(lambda: settled(window), timeout=WAIT_MS)
    np.testing.assert_allclose(
        overlay(window), ref.attention_maps(1, patch=(1, 1))[0].numpy(), atol=ATOL
    )


# -- settings, recent files, folders, clipboard ----------------------------------------------------
def test_settings_remembered_across_windows(qtbot, settings_path: Path) -> None:
    first = new_window(qtbot, settings_path)
    ctl = first.viewer.controls
    ctl.colormap.setCurrentText("magma")
    ctl.opacity.setValue(35)
    select_method(qtbot, first, "rollout")
    first.resize(700, 500)  # within the offscreen platform's 800 × 600 screen
    qtbot.waitUntil(lambda: first.size().width() == 700)
    qtbot.waitUntil(lambda: not first.client.is_busy(), timeout=WAIT_MS)
    saved = (first.width(), first.height())  # the layout's minimum may round the height up
    assert saved[0] == 700 and abs(saved[1] - 500) <= 20
    first.close()

    second = new_window(qtbot, settings_path)
    ctl2 = second.viewer.controls
    assert ctl2.colormap_name() == "magma"
    assert ctl2.opacity.value() == 35
    qtbot.waitUntil(lambda: ctl2.method.currentData() == "rollout", timeout=WAIT_MS)
    assert (second.width(), second.height()) == saved
    QSettings(str(settings_path), QSettings.Format.IniFormat).sync()
    assert settings_path.is_file()


def test_recent_files(qtbot, shown, settings_path: Path, tiny_ckpt: Path, photo_files) -> None:
    window, _ = shown
    chelsea = photo_files["chelsea"]
    assert window.settings.recent("images")[0] == str(chelsea.resolve())
    assert window.settings.recent("checkpoints")[0] == str(tiny_ckpt.resolve())
    drop(window, [photo_files["coffee"]])
    wait_shown(qtbot, window, "coffee.png")
    assert window.settings.recent("images")[:2] == [
        str(photo_files["coffee"].resolve()),
        str(chelsea.resolve()),
    ]

    window.recent_menu.aboutToShow.emit()
    actions = {a.text(): a for a in window.recent_menu.actions()}
    assert "tiny.safetensors  (checkpoint)" in actions
    actions["chelsea.png  (image)"].trigger()
    wait_shown(qtbot, window, "chelsea.png")

    # a new window (same settings) lists them too
    window.close()
    again = new_window(qtbot, settings_path)
    assert again.settings.recent("images")[0] == str(chelsea.resolve())
    again.recent_menu.aboutToShow.emit()
    assert "tiny.safetensors  (checkpoint)" in [a.text() for a in again.recent_menu.actions()]


def test_folder_stepping(qtbot, window: MainWindow, tiny_ckpt: Path, tmp_path: Path) -> None:
    folder = tmp_path / "shots"
    folder.mkdir()
    names = ["img2.png", "img10.png", "img1.png"]
    for i, name in enumerate(names):
        write_image(folder / name, seed=100 + i)
    (folder / "notes.txt").write_text("not an image")
    drop(window, [folder, tiny_ckpt])
    order = ["img1.png", "img2.png", "img10.png"]  # natural order
    wait_shown(qtbot, window, order[0])
    window.act_next.trigger()
    wait_shown(qtbot, window, order[1])
    window.act_next.trigger()
    wait_shown(qtbot, window, order[2])
    window.act_next.trigger()  # wraps around
    wait_shown(qtbot, window, order[0])
    window.act_prev.trigger()
    wait_shown(qtbot, window, order[2])
    ref = analyze(load_checkpoint(tiny_ckpt), folder / order[2])
    np.testing.assert_array_equal(window.viewer.input_view.image.image, ref.pixels)


def test_paste_image_from_clipboard(qtbot, window: MainWindow, tiny_ckpt: Path) -> None:
    drop(window, [tiny_ckpt])
    qtbot.waitUntil(lambda: window.model is not None, timeout=WAIT_MS)
    rgb = np.zeros((40, 56, 3), dtype=np.uint8)
    rgb[:, :28] = (220, 30, 30)
    rgb[:, 28:] = (20, 40, 200)
    rgb[10:20, 5:50] = (250, 250, 20)
    qimage = QImage(rgb.data, 56, 40, 56 * 3, QImage.Format.Format_RGB888).copy()
    QApplication.clipboard().setImage(qimage)
    window.act_paste.trigger()
    wait_shown(qtbot, window, "clipboard")
    ref = analyze(load_checkpoint(tiny_ckpt), rgb)
    np.testing.assert_array_equal(window.viewer.map_view.image.image, rgb)
    np.testing.assert_array_equal(window.viewer.input_view.image.image, ref.pixels)
    np.testing.assert_allclose(
        window.viewer.predictions.probs, [p.probability for p in ref.top_k(5)], atol=ATOL
    )


def test_busy_indicator_and_devices(qtbot, window: MainWindow) -> None:
    qtbot.waitUntil(lambda: window.device_label.text() == "device: cpu", timeout=WAIT_MS)
    assert window.device_combo.itemText(0) == "cpu"
    assert window.device_combo.isEnabled() == (window.device_combo.count() > 1)

    # A job longer than half a second shows the progress bar; it goes when the job ends.
    def slow_job(state) -> str:
        time.sleep(0.8)
        return "nothing"

    window.client.submit("export", slow_job)
    qtbot.waitUntil(window.progress.isVisible, timeout=WAIT_MS)
    qtbot.waitUntil(lambda: not window.progress.isVisible(), timeout=WAIT_MS)


# -- the method table and faithfulness -----------------------------------------------------------
def _toy_map(a: Analysis, q, c, p) -> torch.Tensor:
    gh, gw = a.grid
    return torch.arange(gh * gw, dtype=torch.float32).reshape(gh, gw) * p["scale"]


def test_method_registered_at_run_time_is_listed_and_drawn(
    qtbot, window: MainWindow, tiny_ckpt: Path, photo_files
) -> None:
    scale = Parameter("scale", float, 1.0, "Scale", range=(0.0, 10.0), step=0.5)
    toy = Method("toy-rows", "Toy rows", _toy_map, (scale,), applies_to={"vit", "model-code"})
    other = Method("toy-swin", "Toy for Swin", _toy_map, (scale,), applies_to={"swin"})
    register_method(toy)
    register_method(other)
    try:
        window.refresh_methods()
        image = photo_files["chelsea"]
        drop(window, [image, tiny_ckpt])
        wait_shown(qtbot, window, image.name)
        v, ctl = window.viewer, window.viewer.controls
        labels = [ctl.method.itemText(i) for i in range(ctl.method.count())]
        assert [ctl.method.itemData(i) for i in range(ctl.method.count())] == list(method_names())
        assert "Toy rows" in labels
        items = ctl.method.model()
        swin = items.item(ctl.method.findData("toy-swin"))
        assert not swin.isEnabled() and "swin" in swin.toolTip()
        assert items.item(ctl.method.findData("toy-rows")).isEnabled()
        select_method(qtbot, window, "toy-rows")
        spin = ctl.param_panel.widgets["scale"]  # the panel built from the table entry
        assert (spin.minimum(), spin.maximum(), spin.value()) == (0.0, 10.0, 1.0)
        spin.setValue(2.5)
        qtbot.waitUntil(lambda: settled(window), timeout=WAIT_MS)
        gh, gw = v.image.grid
        expected = np.arange(gh * gw, dtype=np.float32).reshape(gh, gw) * 2.5
        np.testing.assert_array_equal(v.maps.method_map, expected)
        np.testing.assert_array_equal(overlay(window), expected)
        assert v.map_view.full_title == "Toy rows · query CLS · scale 2.50"
    finally:
        unregister_method("toy-rows")
        unregister_method("toy-swin")


def test_old_method_names_in_settings_are_migrated(qtbot, settings_path: Path) -> None:
    settings = make_settings(settings_path)
    settings.set("view/method", "gradient_rollout")
    settings.qs.sync()
    window = new_window(qtbot, settings_path)
    ctl = window.viewer.controls
    qtbot.waitUntil(lambda: ctl.method.currentData() == "gradient-rollout", timeout=WAIT_MS)
    window.close()
    assert make_settings(settings_path).get("view/method") == "gradient-rollout"


def test_faithfulness_panel_shows_evaluate_methods(qtbot, window: MainWindow, tiny_ckpt) -> None:
    image = resources.sample_images()[0]
    drop(window, [image, tiny_ckpt])
    wait_shown(qtbot, window, image.name)
    select_method(qtbot, window, "rollout")
    qtbot.waitUntil(lambda: settled(window), timeout=WAIT_MS)
    panel = window.viewer.faithfulness
    panel.measure.click()
    qtbot.waitUntil(lambda: panel.result is not None, timeout=WAIT_MS)
    a = analyze(load_checkpoint(tiny_ckpt), image)
    mask = mask_grid_for(image, a.geometry)
    assert mask is not None
    ref = evaluate_methods(a, ["rollout", "random"], mask=mask)
    result = panel.result
    assert result.has_mask and result.target_class == ref.target_class
    for name in ("rollout", "random"):
        got, want = result.curves[name], ref.methods[name]
        np.testing.assert_allclose(got.deletion, want.deletion, atol=1e-6)
        np.testing.assert_allclose(got.insertion, want.insertion, atol=1e-6)
        assert got.deletion_auc == pytest.approx(want.deletion_auc, abs=1e-6)
        assert got.insertion_auc == pytest.approx(want.insertion_auc, abs=1e-6)
        assert got.pointing_hit == want.localisation.pointing_hit
        assert got.mass_in_mask == pytest.approx(want.localisation.mass_in_mask, abs=1e-6)
    drawn = panel.deletion.curves["method"].getData()[1]
    np.testing.assert_allclose(drawn, ref.methods["rollout"].deletion, atol=1e-6)
    assert f"{ref.methods['rollout'].insertion_auc:.3f}" in panel.numbers.text()
    assert panel.measure.isEnabled()
    select_method(qtbot, window, "relevance")  # another method: the curves say whose they are
    assert panel.status.text().startswith("These curves are of Attention rollout")


def test_layer_and_head_reach_the_methods_that_use_them(qtbot, shown) -> None:
    """Attention draws every layer and head from the maps it has (no new request); a method
    with layer and head parameters (DINO masks) gets the selectors' values and is recomputed."""
    window, ref = shown
    v = window.viewer
    maps = v.maps
    v.controls.select(layer=1, head=1)
    assert v.maps is maps and settled(window)  # attention: nothing asked of the engine
    select_method(qtbot, window, "dino-masks")
    qtbot.waitUntil(lambda: settled(window), timeout=WAIT_MS)
    expected = ref.dino_masks(1, 0.6)[1].float().numpy()
    np.testing.assert_array_equal(v.maps.method_map, expected)
    v.controls.select(layer=0, head=MEAN)
    qtbot.waitUntil(lambda: settled(window), timeout=WAIT_MS)
    expected = ref.dino_masks(0, 0.6).float().mean(0).numpy()
    np.testing.assert_allclose(v.maps.method_map, expected, atol=ATOL)
    np.testing.assert_allclose(overlay(window), expected, atol=ATOL)
    assert "layer 0 of 0–1 · mean of heads" in v.map_view.full_title


def test_faithfulness_measures_the_attention_on_screen(qtbot, shown, tiny_ckpt: Path) -> None:
    window, ref = shown
    v = window.viewer
    v.controls.select(layer=0, head=1)
    v.faithfulness.measure.click()
    qtbot.waitUntil(lambda: v.faithfulness.result is not None, timeout=WAIT_MS)
    params = {"attention": {"layer": 0, "head": 1}}
    expected = evaluate_methods(ref, ["attention", "random"], params=params)
    got = v.faithfulness.result.curves["attention"]
    np.testing.assert_allclose(got.deletion, expected.methods["attention"].deletion, atol=1e-6)
    np.testing.assert_allclose(got.insertion, expected.methods["attention"].insertion, atol=1e-6)
