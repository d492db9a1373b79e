"""A method the model refuses, at 1280 × 720: the viewer's "shown instead" note is short enough
that the map stays in sight (its full reason in the note's tooltip), and the compare window
greys a method either model refuses with the reason, naming the model (DESIGN §6)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import CLASS_NAMES, random_vit
from swin_helpers import tiny_torchvision_swin
from test_ui_window import WAIT_MS, drop, settled, wait_shown
from window_watch import watched_window

from vitviz.checkpoints import save_checkpoint
from vitviz.ui.canvas import NOTICE_SHARE, TITLE_HEIGHT, ImageCanvas
from vitviz.ui.main_window import MainWindow

REFUSED = "relevance"  # a method the Swin refuses and the ViT runs


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny ViT (32 px) and a tiny Swin (64 px)."""
    folder = tmp_path_factory.mktemp("refused-method")
    vit = save_checkpoint(random_vit(seed=3), folder / "vit.safetensors", class_names=CLASS_NAMES)
    swin = folder / "swin.pth"
    torch.save(tiny_torchvision_swin().state_dict(), swin)
    sidecar = swin.with_name(swin.name + ".vitviz.json")
    sidecar.write_text(json.dumps({"preprocessing": {"image_size": [64, 64]}}))
    return {"vit": vit, "swin": swin}


@pytest.fixture
def window(qtbot, tmp_path: Path) -> MainWindow:
    """The window with its own settings; the bug dialog must not open."""
    yield from watched_window(qtbot, tmp_path)


def open_model(qtbot, window: MainWindow, checkpoint: Path) -> None:
    drop(window, [checkpoint])
    qtbot.waitUntil(
        lambda: window.model is not None and window.model.name == checkpoint.name,
        timeout=WAIT_MS,
    )
    qtbot.waitUntil(lambda: settled(window), timeout=WAIT_MS)


def test_the_shown_instead_note_leaves_the_map_in_sight_at_1280x720(
    qtbot, window: MainWindow, checkpoints: dict[str, Path], photo_files
) -> None:
    window.resize(1280, 720)
    v = window.viewer
    drop(window, [photo_files["chelsea"], checkpoints["vit"]])
    wait_shown(qtbot, window, photo_files["chelsea"].name)
    v.controls.select_method(REFUSED)
    open_model(qtbot, window, checkpoints["swin"])
    why = v.image.unavailable[REFUSED]
    canvas = v.map_view
    qtbot.waitUntil(lambda: "shown instead" in canvas.notice_text(), timeout=WAIT_MS)
    qtbot.wait(50)  # laid out at the window's size
    notice = canvas.notice
    in_sight = notice.y() - TITLE_HEIGHT  # the map's view between its title and the note
    assert canvas.height() > 200, canvas.height()
    assert in_sight >= 0.6 * canvas.height(), (in_sight, canvas.height(), notice.text())
    assert why.rstrip(".") in notice.toolTip()  # the full reason is one hover away


def test_compare_greys_a_method_model_b_refuses_naming_it(
    qtbot, window: MainWindow, checkpoints: dict[str, Path], photo_files
) -> None:
    from PySide6.QtGui import QStandardItemModel

    v = window.viewer
    drop(window, [photo_files["chelsea"], checkpoints["vit"]])
    wait_shown(qtbot, window, photo_files["chelsea"].name)
    v.controls.select_method(REFUSED)
    qtbot.waitUntil(lambda: settled(window), timeout=WAIT_MS)
    assert REFUSED not in v.image.unavailable  # model A runs it
    window.compare_with(checkpoints["swin"])
    qtbot.waitUntil(lambda: window.compare is not None and window.compare.result is not None)
    c = window.compare
    # B's refusal greys it, and the nearest method both run is shown, with B's map (a Swin's
    # gradient rollout: its pass again for the gradients replaces the session's analysis)
    qtbot.waitUntil(
        lambda: c.result.method != REFUSED and c.result.map_b is not None, timeout=WAIT_MS
    )
    model = c.method.model()
    assert isinstance(model, QStandardItemModel)
    item = model.item(c.method.findData(REFUSED))
    assert not item.isEnabled()
    tip = item.toolTip()
    assert tip.startswith("Model B (swin.pth): ") and "swin" in tip.removeprefix("Model B"), tip
    assert "Model A" not in tip  # A runs it
    assert c.method.currentData() == c.result.method != REFUSED
    assert c.result.error == "" and c.status.text() == ""  # never run on B and refused


def test_notes_taller_than_their_share_of_the_view_go_to_the_tooltip(qtbot) -> None:
    """A second note that would cover the map is left to the tooltip ("…" says so)."""
    canvas = ImageCanvas("map")
    qtbot.addWidget(canvas)
    canvas.resize(420, 264)  # the map's view of a 1280 × 720 window
    canvas.show()
    second = "Nearly uniform: every value lies in 0.969–1; " + "the colours span it. " * 8
    canvas.set_message(f"Attention shown instead.\n\n{second}")
    qtbot.wait(10)
    notice = canvas.notice
    assert notice.height() <= NOTICE_SHARE * canvas.height(), notice.height()
    assert notice.text() == "Attention shown instead.\n…"
    assert second in notice.toolTip()
    canvas.set_message("Attention shown instead.")  # one short note: whole, no tooltip
    assert notice.text() == "Attention shown instead." and notice.toolTip() == ""
