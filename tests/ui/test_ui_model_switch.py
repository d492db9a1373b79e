"""Switching models with a hover and a query set: everything tied to the old model's geometry
(the patch under the pointer, the query, layer and head, a method's layer parameter, the
thumbnails, the overlay, the window outline, the status bar) is reset or mapped, never read
with the new model's grid. Each switch both ways: a ViT and a Swin, an 8 × 8 grid (the shipped
model) and a 12 × 12 one (ViT-B/16's), a CLS model and a pooled one."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import random_vit
from PySide6.QtGui import QCursor
from PySide6.QtTest import QTest
from swin_helpers import tiny_torchvision_swin
from test_ui_window import (
    WAIT_MS,
    click,
    drop,
    overlay,
    settled,
    wait_shown,
)
from window_watch import watched_window

from vitviz.checkpoints import save_checkpoint
from vitviz.core import resources
from vitviz.ui.canvas import ImageCanvas
from vitviz.ui.controls import MEAN
from vitviz.ui.main_window import MainWindow

SWIN_SIZE = 64  # a 16 × 16 grid of 4-pixel patches (stages 16 × 16 and 8 × 8)
PAIRS = [("swin", "shipped"), ("shipped", "vit12"), ("pooled", "shipped")]  # each both ways


@pytest.fixture
def checkpoints(tmp_path: Path) -> dict[str, Path]:
    """The shipped model (8 × 8, CLS), a ViT-B/16-shaped grid (12 × 12, 3 layers × 3 heads),
    a pooled ViT without CLS (8 × 8) and a tiny Swin (16 × 16, no CLS)."""
    names = [f"k{i}" for i in range(5)]
    vit12 = random_vit(image_size=192, patch_size=16, dim=48, depth=3, heads=3, seed=1)
    pooled = random_vit(
        image_size=64, patch_size=8, depth=3, heads=2, class_token=False, global_pool="avg"
    )
    swin = tmp_path / "swin.pth"
    torch.save(tiny_torchvision_swin().state_dict(), swin)
    sidecar = swin.with_name(swin.name + ".vitviz.json")
    sidecar.write_text(json.dumps({"preprocessing": {"image_size": [SWIN_SIZE, SWIN_SIZE]}}))
    shipped = resources.default_model_path()
    assert shipped is not None
    return {
        "shipped": shipped,
        "vit12": save_checkpoint(vit12, tmp_path / "vit12.safetensors", class_names=names),
        "pooled": save_checkpoint(pooled, tmp_path / "pooled.safetensors", class_names=names),
        "swin": swin,
    }


@pytest.fixture
def window(qtbot, tmp_path: Path) -> MainWindow:
    """The window with its own settings; the bug dialog must not open."""
    yield from watched_window(qtbot, tmp_path)


def hover(qtbot, canvas: ImageCanvas, patch: tuple[int, int]) -> None:
    """A real mouse move over the centre of ``patch`` (after pyqtgraph's rate limit of mouse
    moves, 10 ms, has passed since the last one)."""
    qtbot.wait(15)
    scene = canvas.vb.mapViewToScene(canvas.patch_rect(*patch).center())
    QTest.mouseMove(canvas.viewport(), canvas.mapFromScene(scene))


def hover_text(window: MainWindow, patch: tuple[int, int]) -> str:
    """What the status bar should say over ``patch``: the shown map's own cell and value."""
    v = window.viewer
    values, _ = v.current_map()
    gh, gw = v.image.grid
    mh, mw = values.shape
    r, c = patch[0] * mh // gh, patch[1] * mw // gw
    where = (
        f"patch row {r}, col {c}, index {r * mw + c}"
        if (mh, mw) == (gh, gw)
        else f"token row {r}, col {c} of {mh}×{mw}, index {r * mw + c}"
    )
    return f"{where}, value {values[r, c]:.4g}"


@pytest.mark.parametrize(("first", "second"), PAIRS)
def test_switch_both_ways_with_hover_and_query(
    qtbot, window: MainWindow, checkpoints: dict[str, Path], photo_files, first: str, second: str
) -> None:
    messages: list[str] = []
    window.notifier.userMessage.connect(messages.append)
    image = photo_files["chelsea"]
    drop(window, [image, checkpoints[first]])
    wait_shown(qtbot, window, image.name)
    switch(qtbot, window, checkpoints[second])
    switch(qtbot, window, checkpoints[first])
    assert messages == []


def switch(qtbot, window: MainWindow, checkpoint: Path) -> None:
    """Set a query, the deepest layer and last head, a rollout start layer, a zoom, the
    pointer over the last patch row (row 15 of the Swin's 16 × 16) and ask for faithfulness
    curves; open ``checkpoint``; check every piece of that state on the new model."""
    v = window.viewer
    v.controls.select_method("attention")
    old = v.image
    gh, gw = old.grid
    v.controls.select(layer=old.num_layers - 1)
    v.controls.select(head=v.controls.head.count() - 2)
    v.controls.param_panel.set_value("rollout", "start_layer", old.num_layers - 1)
    click(v.map_view, v.map_view.vb.mapViewToScene(v.map_view.patch_rect(gh - 2, 1).center()))
    qtbot.waitUntil(lambda: settled(window) and v.maps.params.query == (gh - 2, 1))
    v.map_view.vb.scaleBy((1.25, 1.25))  # zoomed out: every patch stays in view
    hover(qtbot, v.map_view, (gh - 1, gw - 1))
    qtbot.waitUntil(lambda: window.hover_label.text() == hover_text(window, (gh - 1, gw - 1)))
    old_text = window.hover_label.text()
    v.faithfulness.measure.click()  # curves of this model, dropped by the switch
    zoom = v.map_view.vb.viewRange()

    drop(window, [checkpoint])
    qtbot.waitUntil(
        lambda: (
            window.model.name == checkpoint.name
            and settled(window)
            and v.image.geometry() != old.geometry()
        ),
        timeout=WAIT_MS,
    )
    new = v.image
    ngh, ngw = new.grid
    swin = new.token_geometry.layers[0].windows is not None  # a windowed model (a Swin)
    # the query: kept on the same grid, else back to CLS / the mean, and said so
    assert v.query == ((gh - 2, 1) if new.grid == old.grid else None)
    assert v.maps.params.query == v.query
    if v.query is None:
        assert v.controls.query_label.text() in (
            "CLS token" if new.num_prefix_tokens else "mean of patches",
            "average pool (every token)",
        )
    # layer and head within the new model; thumbnails and overlay of its shape
    layer, head = v.controls.selected_layer(), v.controls.selected_head()
    assert layer == min(old.num_layers, new.num_layers) - 1
    assert head == MEAN or 0 <= head < v.controls.head.count() - 1
    assert v.head_grid.shape == (new.num_layers, new.num_heads)
    thumbs = new.thumb_grid if swin else new.grid
    assert v.maps.head_maps.shape == (new.num_layers, new.num_heads, *thumbs)
    values, _ = v.current_map()
    np.testing.assert_array_equal(overlay(window), values)
    assert all(np.isfinite(v.map_view.value_at(r, c)) for r in range(ngh) for c in range(ngw))
    assert v.map_view.window_lines.path().isEmpty() != swin  # a Swin's windows, only there
    qtbot.wait(200)  # the old model's curves, had they been kept, would have come by now
    assert v.faithfulness.result is None
    # the pointer has not moved: the hover is the new grid's patch under it, the status bar
    # says so or that the image was analysed, never the old grid's patch
    assert v._hovered == v.map_view.patch_at(*_pointer_in_view(v.map_view))
    text = window.hover_label.text()
    assert text != old_text
    assert text.startswith(f"{new.label}: analysed in") or text == hover_text(window, v._hovered)
    assert v.map_view.vb.viewRange() == zoom  # the same photo: its zoom stays
    for patch in ((ngh - 1, 0), (ngh // 2, ngw - 1)):
        hover(qtbot, v.map_view, patch)
        qtbot.waitUntil(lambda p=patch: window.hover_label.text() == hover_text(window, p))
    if swin:  # the status bar counts the tokens of the title's grid
        click(v.map_view, v.map_view.vb.mapViewToScene(v.map_view.patch_rect(ngh - 1, 0).center()))
        qtbot.waitUntil(lambda: settled(window) and v.query == (ngh - 1, 0), timeout=WAIT_MS)
        mh, mw = v.current_map()[0].shape
        assert (mh, mw) != (ngh, ngw) and f"of {mh}×{mw}" in v.map_view.full_title
        hover(qtbot, v.map_view, (ngh - 1, 0))
        qtbot.waitUntil(
            lambda: window.hover_label.text().startswith(f"token row {mh - 1}, col 0 of {mh}×{mw}")
        )
    # the rollout's start layer, kept for this method, within the new model's layers
    v.controls.select_method("rollout")
    qtbot.waitUntil(lambda: settled(window) and v.maps.params.method == "rollout", timeout=WAIT_MS)
    start = dict(v.maps.params.values).get("start_layer", 0)
    assert start == min(old.num_layers, new.num_layers) - 1
    assert swin or f"layers {start}–{new.num_layers - 1}" in v.map_view.full_title
    assert np.isfinite(overlay(window)).all()


def _pointer_in_view(canvas: ImageCanvas) -> tuple[float, float]:
    """The pointer's place in the view's coordinates (image pixels)."""
    local = canvas.viewport().mapFromGlobal(QCursor.pos())
    p = canvas.vb.mapSceneToView(canvas.mapToScene(local))
    return p.x(), p.y()
