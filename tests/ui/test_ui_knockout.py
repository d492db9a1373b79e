"""Knocking heads out in the window (DESIGN §5, "Interventions"): the toolbar's "Knock out"
toggle and Alt+click toggle a head (the engine re-analyses with it knocked out: the predictions
are the intervened model's, the tile greyed with a cross, the status bar names the head);
"Restore all" brings the model back; the importance view colours the tiles by each head's
effect, with its scale, and says the value on hover; a new model restores every head."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import random_vit
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QGraphicsLineItem, QGraphicsRectItem
from test_ui_window import WAIT_MS, click, settled, wait_shown
from window_watch import watched_window

from vitviz.checkpoints import load_checkpoint, save_checkpoint
from vitviz.core.resources import DEFAULT_MODEL_NAME, resource_dir
from vitviz.imaging.colormaps import tick_text
from vitviz.imaging.effect_grid import diverging_colours
from vitviz.pipeline.analysis import analyze
from vitviz.pipeline.head_effects import head_effects
from vitviz.pipeline.interventions import knocked_out
from vitviz.ui.effect_tiles import KNOCKED_FILL, NO_MEAN_EFFECT, PATCH_UNIT
from vitviz.ui.head_grid import MEAN
from vitviz.ui.knockout import knocked_words
from vitviz.ui.main_window import MainWindow
from vitviz.workers.interventions import PatchingResult
from vitviz.workers.messages import ImageResult


@pytest.fixture
def files(tmp_path: Path, photo_files) -> tuple[Path, Path, Path]:
    names = [f"k{i}" for i in range(5)]
    a = random_vit(image_size=64, patch_size=8, dim=48, depth=3, heads=3, seed=2)
    b = random_vit(image_size=64, patch_size=8, depth=2, heads=2, seed=3)
    return (
        save_checkpoint(a, tmp_path / "a.safetensors", class_names=names),
        save_checkpoint(b, tmp_path / "b.safetensors", class_names=names),
        photo_files["chelsea"],
    )


@pytest.fixture
def window(qtbot, tmp_path: Path) -> MainWindow:
    yield from watched_window(qtbot, tmp_path)


def _greyed(window: MainWindow) -> set[tuple[int, int]]:
    """The tiles drawn greyed with a cross, read from the items over the grid."""
    grid = window.viewer.head_grid
    gh, gw = grid.layout.tile
    out = set()
    items = grid.vb.addedItems
    crosses = [i for i in items if isinstance(i, QGraphicsLineItem)]
    for item in items:
        if isinstance(item, QGraphicsRectItem) and item.brush().color() == KNOCKED_FILL:
            assert item.zValue() > grid.maps.zValue()  # over the thumbnail
            rect = item.rect()
            cell = grid.cell_at(rect.x() + gw / 2, rect.y() + gh / 2)
            assert cell is not None
            inside = [c for c in crosses if rect.contains(c.line().center())]
            assert len(inside) == 2  # a cross on it
            out.add(cell)
    return out


def _probs(window: MainWindow) -> np.ndarray:
    return np.asarray(window.viewer.image.probs)


def test_knock_out_restore_and_importance(qtbot, window, files) -> None:
    ckpt, other, photo = files
    window.open_checkpoint(ckpt)
    window.open_image(photo)
    wait_shown(qtbot, window, photo.name)
    loaded = load_checkpoint(ckpt)
    clean = analyze(loaded, photo).probs.numpy()
    np.testing.assert_allclose(_probs(window), clean, atol=1e-5)
    ko, grid = window.knockout, window.viewer.head_grid
    assert not ko.status.isVisible() and not ko.act_restore.isEnabled()

    ko.act_mode.setChecked(True)  # the toolbar toggle: a click on a tile knocks it out
    click(grid, grid.tile_center(2, 1))
    qtbot.waitUntil(lambda: settled(window) and ko.knocked == {(2, 1)}, timeout=WAIT_MS)
    qtbot.waitUntil(
        lambda: np.abs(_probs(window) - clean).max() > 1e-4, timeout=WAIT_MS
    )  # the intervened model's predictions
    want = analyze(loaded, photo, ablate=[(2, 1)]).probs.numpy()
    np.testing.assert_allclose(_probs(window), want, atol=1e-5)
    assert _greyed(window) == {(2, 1)}
    assert ko.status.isVisible() and "2.1" in ko.status.text()
    assert ko.act_restore.isEnabled()

    ko.act_mode.setChecked(False)  # Alt+click knocks out without the mode
    pos = grid.mapFromScene(grid.tile_center(0, 2))
    QTest.mouseClick(grid.viewport(), Qt.MouseButton.LeftButton, Qt.KeyboardModifier.AltModifier,
                     pos)  # fmt: skip
    qtbot.waitUntil(lambda: settled(window) and ko.knocked == {(2, 1), (0, 2)}, timeout=WAIT_MS)
    want = analyze(loaded, photo, ablate=[(2, 1), (0, 2)]).probs.numpy()
    qtbot.waitUntil(lambda: np.abs(_probs(window) - want).max() < 1e-5, timeout=WAIT_MS)
    assert _greyed(window) == {(2, 1), (0, 2)} and "0.2, 2.1" in ko.status.text()
    click(grid, grid.tile_center(1, 1))  # a plain click without the mode: no knocking out
    qtbot.wait(200)
    assert ko.knocked == {(2, 1), (0, 2)}

    ko.act_importance.setChecked(True)  # the importance view, on the intervened model
    qtbot.waitUntil(lambda: ko.effect is not None, timeout=WAIT_MS)
    target = window.viewer.image.top_class
    with knocked_out(loaded, photo, [(2, 1), (0, 2)]):
        x = analyze(loaded, photo).input
        effects = head_effects(loaded, x, target)
    np.testing.assert_allclose(ko.effect, effects.effect.numpy(), atol=1e-5)
    assert ko.scale.isVisible()
    assert ko.status.text().endswith(" · effects measured on it")  # with 2 heads out
    lo, hi = ko.overlay.levels
    assert lo == -hi and hi >= np.nanmax(np.abs(ko.effect))
    coloured = [
        i for i in grid.vb.addedItems
        if isinstance(i, QGraphicsRectItem) and i.zValue() == 20
        and i.brush().color() != KNOCKED_FILL
    ]  # fmt: skip
    assert len(coloured) == 9
    info = grid.hover_info(grid.tile_center(1, 0))
    ko._on_hover(info)
    assert f"{effects.effect[1, 0]:+.4g}" in grid.toolTip()

    ko.act_restore.trigger()  # every head back: the clean model's predictions
    qtbot.waitUntil(lambda: settled(window) and not ko.knocked, timeout=WAIT_MS)
    qtbot.waitUntil(lambda: np.abs(_probs(window) - clean).max() < 1e-5, timeout=WAIT_MS)
    assert _greyed(window) == set() and not ko.status.isVisible()

    ko.toggle(1, 1)  # a new model restores every head, in the engine and on screen
    qtbot.waitUntil(lambda: settled(window) and ko.knocked == {(1, 1)}, timeout=WAIT_MS)
    window.open_checkpoint(other)
    qtbot.waitUntil(lambda: settled(window) and grid.shape == (2, 2), timeout=WAIT_MS)
    assert not ko.knocked and not ko.status.isVisible()
    clean_b = analyze(load_checkpoint(other), photo).probs.numpy()
    qtbot.waitUntil(lambda: np.abs(_probs(window) - clean_b).max() < 1e-5, timeout=WAIT_MS)


def test_a_tile_of_a_head_the_layer_lacks_is_no_head(qtbot, window, tmp_path, photo_files):
    """A Swin's first stage has fewer heads than its grid's columns: its empty tiles can't be
    knocked out; a real head of the last stage can, and the predictions are the intervened
    model's."""
    import json

    import torch
    from swin_helpers import tiny_torchvision_swin

    swin = tmp_path / "swin.pth"
    torch.save(tiny_torchvision_swin().state_dict(), swin)
    side = {"preprocessing": {"image_size": [64, 64]}}
    swin.with_name(swin.name + ".vitviz.json").write_text(json.dumps(side))
    photo = photo_files["chelsea"]
    window.open_checkpoint(swin)
    window.open_image(photo)
    wait_shown(qtbot, window, photo.name)
    ko, grid = window.knockout, window.viewer.head_grid
    assert grid.row_heads()[0] < grid.shape[1]
    ko.act_mode.setChecked(True)
    click(grid, grid.tile_center(0, grid.shape[1] - 1))  # a tile of no head
    qtbot.wait(200)
    assert not ko.knocked and not window.client.is_busy()
    last = grid.shape[0] - 1
    click(grid, grid.tile_center(last, grid.shape[1] - 1))
    qtbot.waitUntil(lambda: settled(window) and ko.knocked == {(last, 3)}, timeout=WAIT_MS)
    loaded = load_checkpoint(swin)
    want = analyze(loaded, photo, ablate=[(last, 3)]).probs.numpy()
    qtbot.waitUntil(lambda: np.abs(_probs(window) - want).max() < 1e-5, timeout=WAIT_MS)
    assert _greyed(window) == {(last, 3)}


def test_mean_ablation_beside_the_toggle(qtbot, window, files, photo_files) -> None:
    """The ablation chosen beside "Knock out": mean gives the mean-ablated model's predictions,
    the status line says which, and a new image gets its own means."""
    ckpt, _, photo = files
    window.open_checkpoint(ckpt)
    window.open_image(photo)
    wait_shown(qtbot, window, photo.name)
    loaded = load_checkpoint(ckpt)
    ko = window.knockout
    ko.toggle(2, 1)
    ko.toggle(0, 2)
    zero = analyze(loaded, photo, ablate=[(2, 1), (0, 2)]).probs.numpy()
    qtbot.waitUntil(lambda: np.abs(_probs(window) - zero).max() < 1e-5, timeout=WAIT_MS)
    assert "(zero ablation)" in ko.status.text()

    ko.ablation.setCurrentText("mean")  # the knocked-out heads again, as their means
    mean = analyze(loaded, photo, ablate=[(2, 1), (0, 2)], ablation="mean").probs.numpy()
    assert np.abs(mean - zero).max() > 1e-4  # the two ablations differ: the test can fail
    qtbot.waitUntil(lambda: np.abs(_probs(window) - mean).max() < 1e-5, timeout=WAIT_MS)
    assert "(mean ablation)" in ko.status.text() and "0.2, 2.1" in ko.status.text()

    rocket = photo_files["rocket"]  # another image: its own tokens' means, the first time
    arrived: list[np.ndarray] = []
    window.client.resultReady.connect(
        lambda _c, r: arrived.append(np.asarray(r.probs))
        if isinstance(r, ImageResult) and r.label == rocket.name else None
    )  # fmt: skip
    window.open_image(rocket)
    wait_shown(qtbot, window, rocket.name)
    want = analyze(loaded, rocket, ablate=[(2, 1), (0, 2)], ablation="mean").probs.numpy()
    qtbot.waitUntil(lambda: np.abs(_probs(window) - want).max() < 1e-5, timeout=WAIT_MS)
    assert settled(window) and ko.knocked == {(2, 1), (0, 2)}
    assert len(arrived) == 1 and np.abs(arrived[0] - want).max() < 1e-5  # no stale first one


def test_patch_from_a_second_image(qtbot, window, files, photo_files, monkeypatch) -> None:
    """The "Patch from…" view: the clean image's patching effects into the shown one coloured on the
    head grid, with the scale and the value on hover; unchecking it puts the grid back."""
    from vitviz.pipeline.head_effects import patching_effects

    ckpt, _, photo = files
    window.open_checkpoint(ckpt)
    window.open_image(photo)
    wait_shown(qtbot, window, photo.name)
    ko, grid = window.knockout, window.viewer.head_grid
    rocket = photo_files["rocket"]
    from vitviz.ui import file_dialogs

    monkeypatch.setattr(file_dialogs, "open_file", lambda *a, **k: str(rocket))  # the dialog
    ko.act_patch.trigger()
    qtbot.waitUntil(lambda: settled(window) and ko.effect is not None, timeout=WAIT_MS)
    loaded = load_checkpoint(ckpt)
    want = patching_effects(loaded, rocket, photo)
    np.testing.assert_allclose(ko.effect, want.effect.numpy(), atol=1e-4)
    assert np.abs(ko.effect).max() > 1e-3  # not an empty grid
    assert ko.act_patch.isChecked() and ko.scale.isVisible()
    assert rocket.name in ko.scale.title.text()
    lo, hi = ko.overlay.levels
    assert lo == -hi and hi >= np.nanmax(np.abs(ko.effect))
    coloured = [
        i for i in grid.vb.addedItems
        if isinstance(i, QGraphicsRectItem) and i.zValue() == 20
        and i.brush().color() != KNOCKED_FILL
    ]  # fmt: skip
    assert len(coloured) == 9
    ko._on_hover(grid.hover_info(grid.tile_center(2, 0)))
    assert f"patching effect {want.effect[2, 0]:+.4g}" in grid.toolTip()

    ko.act_patch.trigger()  # unchecked: the plain grid again
    assert ko.effect is None and not ko.scale.isVisible() and ko.patch_clean is None
    assert not [i for i in grid.vb.addedItems if isinstance(i, QGraphicsRectItem)
                and i.zValue() == 20]  # fmt: skip


def test_the_status_bar_keeps_the_model_line_whole_at_1366(qtbot, window) -> None:
    """At 1366 px the intervention line gives way to the model line: the model line is whole,
    the intervention line keeps its start (the ablation, how many heads) and its whole text is
    its tooltip; neither covers the other."""
    ko = window.knockout
    window.model_label.setText(
        "vit-twelve-layers-by-twelve-heads-demo.safetensors · Vision Transformer (vitviz, "
        "12 layers × 12 heads, 5 classes)"
    )
    ko.knocked = {(layer, (5 * layer) % 12) for layer in range(10)}
    ko._show()  # what a knocked-out result shows
    window.resize(1366, 768)
    qtbot.waitUntil(lambda: window.width() == 1366 and ko.status.isVisible(), timeout=WAIT_MS)
    model, status = window.model_label, ko.status
    qtbot.waitUntil(lambda: model.width() >= model.sizeHint().width(), timeout=WAIT_MS)
    assert model.geometry().right() < status.geometry().left()
    assert status.geometry().right() <= window.statusBar().width()
    assert status.width() < status.sizeHint().width()  # cut, so its tooltip says it whole
    assert status.toolTip() == status.text() and "10 heads knocked out" in status.text()


def test_the_map_title_names_the_heads_knocked_out(qtbot, window, files) -> None:
    """The large map's title says the model is intervened (which heads, and how: zero or mean),
    right after the method (a short view drops a title's last parts first); restored: not."""
    ckpt, _, photo = files
    window.open_checkpoint(ckpt)
    window.open_image(photo)
    wait_shown(qtbot, window, photo.name)
    ko, view = window.knockout, window.viewer.map_view
    assert "knocked out" not in view.full_title
    ko.toggle(2, 1)
    ko.toggle(0, 2)
    qtbot.waitUntil(
        lambda: settled(window) and window.viewer.image.knocked_out == ((0, 2), (2, 1)),
        timeout=WAIT_MS,
    )
    # the ablation is always named: zero is said, not left for the reader to guess
    assert view.full_title.startswith("Attention · heads 0.2, 2.1 knocked out (zero ablation) · ")
    window.viewer.controls.select_method("rollout")  # a method's map too
    qtbot.waitUntil(
        lambda: settled(window) and view.full_title.startswith("Attention rollout · heads"),
        timeout=WAIT_MS,
    )
    assert "heads 0.2, 2.1 knocked out (zero ablation) · " in view.full_title
    ko.ablation.setCurrentText("mean")
    qtbot.waitUntil(
        lambda: "heads 0.2, 2.1 knocked out (mean ablation) · " in view.full_title,
        timeout=WAIT_MS,
    )
    ko.act_restore.trigger()
    qtbot.waitUntil(
        lambda: settled(window) and "knocked out" not in view.full_title, timeout=WAIT_MS
    )
    assert view.full_title.startswith("Attention rollout · ")


def test_the_knocked_out_words_always_name_the_ablation() -> None:
    """Zero ablation is named as mean ablation is: a title without it can't be told from one
    that leaves the ablation unsaid."""
    assert knocked_words(((0, 2),)) == "head 0.2 knocked out (zero ablation)"
    assert knocked_words(((2, 1), (0, 2)), "zero") == "heads 0.2, 2.1 knocked out (zero ablation)"
    assert knocked_words(((0, 2),), "mean") == "head 0.2 knocked out (mean ablation)"
    assert knocked_words(()) == ""


SHIPPED = resource_dir() / "models" / DEFAULT_MODEL_NAME  # a 4 × 4-head ViT with 10 classes
SAMPLES = resource_dir() / "samples"


def _effect_rects(grid) -> list[QGraphicsRectItem]:
    return [
        i for i in grid.vb.addedItems
        if isinstance(i, QGraphicsRectItem) and i.zValue() == 20
        and i.brush().color() != KNOCKED_FILL
    ]  # fmt: skip


def _bars_tell_the_effects(window: MainWindow, unit: str) -> None:
    """What the effect views draw, and only that: no attention thumbnail, nor their viridis bar
    or their scale choice; the effect's bar with its range and unit; every tile the bar's
    colour of its value, opaque; the mean column's hover says it has no effect."""
    ko, grid, panel = window.knockout, window.viewer.head_grid, window.viewer.head_panel
    assert not grid.maps.isVisible()  # the mean column's attention too: no bar says its scale
    assert not grid.colorbar.isVisible() and not panel.scale.isVisibleTo(panel)
    assert ko.scale.isVisible()
    lo, hi = ko.overlay.levels
    assert ko.scale.lo.text() == tick_text(lo) and ko.scale.hi.text().startswith(
        f"+{tick_text(hi)} {unit}"
    )
    colours = diverging_colours(ko.effect, ko.overlay.levels)
    rects = _effect_rects(grid)
    assert len(rects) == int(np.isfinite(ko.effect).sum())
    gh, gw = grid.layout.tile
    for item in rects:
        rect = item.rect()
        layer, head = grid.cell_at(rect.x() + gw / 2, rect.y() + gh / 2)
        colour = item.brush().color()
        assert colour.alpha() == 255, "the attention under it would tint the bar's colour"
        assert (colour.red(), colour.green(), colour.blue()) == tuple(colours[layer, head])
    ko._on_hover(grid.hover_info(grid.tile_center(1, MEAN)))
    assert grid.toolTip() == f"layer 1, mean of heads · {NO_MEAN_EFFECT}"


def test_the_bars_shown_describe_the_effect_tiles(qtbot, window) -> None:
    """Head importance and patching colour the heads' tiles by their effect: the attention
    thumbnails' viridis bar (which would describe only the mean column) and the scale choice
    go, the diverging bar says the range and the unit; off, the thumbnails come back."""
    star, heart = SAMPLES / "star.png", SAMPLES / "heart.png"
    window.open_checkpoint(SHIPPED)
    window.open_image(star)
    wait_shown(qtbot, window, star.name)
    ko, grid, panel = window.knockout, window.viewer.head_grid, window.viewer.head_panel
    assert grid.maps.isVisible() and grid.colorbar.isVisible() and panel.scale.isVisibleTo(panel)
    ko.act_importance.setChecked(True)
    qtbot.waitUntil(lambda: settled(window) and ko.effect is not None, timeout=WAIT_MS)
    _bars_tell_the_effects(window, "logits")

    ko.patch_from(heart)
    qtbot.waitUntil(lambda: settled(window) and ko.effect is not None and not
                    ko.act_importance.isChecked(), timeout=WAIT_MS)  # fmt: skip
    _bars_tell_the_effects(window, PATCH_UNIT)

    ko.act_patch.trigger()  # off: the thumbnails, their bar and the choice of scale again
    assert grid.maps.isVisible() and grid.colorbar.isVisible() and panel.scale.isVisibleTo(panel)
    assert not ko.scale.isVisible() and not _effect_rects(grid)


def test_knocking_out_while_patching_measures_again_and_says_so(qtbot, window, monkeypatch) -> None:
    """The patching grid shown, the toolbar's "Knock out" and a click on a tile: the clean
    model's effects go at once (no tile keeps a colour of another model; a result of it that
    comes late is not shown), the grid waits for the intervened model's effects, measured
    again, and the status bar says they are its, with the heads; every head back: measured on
    the model as it is, and the line goes."""
    from vitviz.pipeline.head_effects import patching_effects
    from vitviz.ui import file_dialogs

    star, heart = SAMPLES / "star.png", SAMPLES / "heart.png"
    window.open_checkpoint(SHIPPED)
    window.open_image(star)
    wait_shown(qtbot, window, star.name)
    ko, grid = window.knockout, window.viewer.head_grid
    monkeypatch.setattr(file_dialogs, "open_file", lambda *a, **k: str(heart))  # the dialog
    ko.act_patch.trigger()
    qtbot.waitUntil(lambda: settled(window) and ko.effect is not None, timeout=WAIT_MS)
    clean = ko.effect.copy()
    assert not ko.status.isVisible() and "intervened" not in ko.scale.title.text()

    ko.act_mode.setChecked(True)  # the toolbar's toggle alone changes nothing shown
    assert ko.effect is not None and not ko.knocked
    click(grid, grid.tile_center(3, 0))
    assert ko.knocked == {(3, 0)} and ko.patch_clean == str(heart) and ko.act_patch.isChecked()
    ctl = window.viewer.controls  # the tile clicked is shown large, as any click shows it
    assert (ctl.layer.value(), ctl.head.currentData()) == (3, 0)
    assert ko.effect is None and not _effect_rects(grid) and not grid.maps.isVisible()
    assert "measuring" in ko.scale.title.text()
    assert ko.status.isVisible() and ko.status.text() == (
        "Intervened model (zero ablation): 1 head knocked out: 3.0 · measuring effects on it…"
    )
    late = PatchingResult(clean, 0, "circle", heart.name, knocked_out=())  # the clean model's
    ko._on_result("interventions", late)
    assert ko.effect is None  # not shown as the intervened model's

    qtbot.waitUntil(lambda: settled(window) and ko.effect is not None, timeout=WAIT_MS)
    loaded = load_checkpoint(SHIPPED)
    with knocked_out(loaded, star, [(3, 0)]):
        want = patching_effects(loaded, heart, star)
    np.testing.assert_allclose(ko.effect, want.effect.numpy(), atol=1e-4)
    assert np.nanmax(np.abs(ko.effect - clean)) > 1e-3  # measured again: the test can tell
    assert ko.status.text() == (
        "Intervened model (zero ablation): 1 head knocked out: 3.0 · effects measured on it"
    )
    assert "intervened model" in ko.scale.title.text() and "3.0" in ko.scale.toolTip()
    assert len(_effect_rects(grid)) == 16 and _greyed(window) == {(3, 0)}

    ko.act_restore.trigger()  # every head back: the model as it is, measured again
    qtbot.waitUntil(
        lambda: settled(window) and not ko.knocked and ko.effect is not None, timeout=WAIT_MS
    )
    np.testing.assert_allclose(ko.effect, clean, atol=1e-4)
    assert not ko.status.isVisible() and "intervened" not in ko.scale.title.text()


def test_a_measure_that_fails_puts_the_attention_grid_back(qtbot, window, tmp_path) -> None:
    """ "Patch from…" an image that can't be read: the message says why, and the grid shows
    the attention thumbnails with their bar again, not a view waiting for effects."""
    star = SAMPLES / "star.png"
    window.open_checkpoint(SHIPPED)
    window.open_image(star)
    wait_shown(qtbot, window, star.name)
    ko, grid = window.knockout, window.viewer.head_grid
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"not a picture")
    said: list[str] = []
    window.client.userError.connect(lambda channel, error: said.append(error.message))
    ko.patch_from(broken)
    assert ko.effect_view() == "patching" and not grid.maps.isVisible()
    qtbot.waitUntil(lambda: bool(said), timeout=WAIT_MS)
    assert said[0].startswith("Patch from broken.png: ")
    assert ko.effect_view() is None and not ko.act_patch.isChecked()
    assert grid.maps.isVisible() and grid.colorbar.isVisible() and not ko.scale.isVisible()
