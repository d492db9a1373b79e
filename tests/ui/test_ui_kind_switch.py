"""A new user's walk across kinds: each model opened after another shows nothing the old one
left (DESIGN §6: a control, title or plot never keeps state that a newly opened model can't
have). The shipped model with a query in its last patch row, then a tiny ViT whose input is
smaller (32 px): the model input is shown whole, fitted to its view."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import CLASS_NAMES, random_vit
from test_ui_window import WAIT_MS, click, drop, new_window, settled, wait_shown

from vitviz.checkpoints import save_checkpoint
from vitviz.core import resources
from vitviz.ui.canvas import ImageCanvas
from vitviz.ui.main_window import MainWindow


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The shipped model and a tiny ViT of a smaller input (32 px, a 4 × 4 grid)."""
    folder = tmp_path_factory.mktemp("kind-switch")
    shipped = resources.default_model_path()
    assert shipped is not None
    small = save_checkpoint(
        random_vit(seed=3), folder / "small.safetensors", class_names=CLASS_NAMES
    )
    return {"shipped": shipped, "small": small}


@pytest.fixture
def window(qtbot, tmp_path: Path) -> MainWindow:
    """The window with its own settings; the bug dialog must not open."""
    w = new_window(qtbot, tmp_path / "settings.ini")
    bugs: list[str] = []
    w.notifier.bugReported.connect(lambda summary, details: bugs.append(details))
    yield w
    assert not bugs, f"the bug dialog was shown: {bugs}"


def fitted(canvas: ImageCanvas) -> bool:
    """The view shows its whole image and the image fills the view one way."""
    (x0, x1), (y0, y1) = canvas.vb.viewRange()
    r = canvas.image.mapRectToView(canvas.image.boundingRect())
    slack = 0.05 * max(r.width(), r.height())
    whole = x0 <= r.left() + slack and x1 >= r.right() - slack
    whole = whole and y0 <= r.top() + slack and y1 >= r.bottom() - slack
    return whole and max(r.width() / (x1 - x0), r.height() / (y1 - y0)) > 0.9


def open_model(qtbot, window: MainWindow, checkpoint: Path) -> None:
    drop(window, [checkpoint])
    qtbot.waitUntil(
        lambda: (
            window.model is not None and window.model.name == checkpoint.name and settled(window)
        ),
        timeout=WAIT_MS,
    )


def test_a_smaller_input_is_shown_whole_after_a_query_on_the_last(
    qtbot, window: MainWindow, checkpoints: dict[str, Path], photo_files
) -> None:
    v = window.viewer
    drop(window, [photo_files["chelsea"], checkpoints["shipped"]])
    wait_shown(qtbot, window, photo_files["chelsea"].name)
    gh, gw = v.image.grid
    box = v.input_view
    click(box, box.vb.mapViewToScene(box.patch_rect(gh - 1, gw - 1).center()))
    qtbot.waitUntil(lambda: settled(window) and v.query == (gh - 1, gw - 1), timeout=WAIT_MS)
    old_side = v.image.input_pixels.shape[0]
    open_model(qtbot, window, checkpoints["small"])
    assert v.image.input_pixels.shape[0] < old_side  # the new input is smaller
    assert v.query is None
    assert fitted(v.input_view), v.input_view.vb.viewRange()
    assert fitted(v.map_view)
