"""An XCiT in the window: head-grid rows "CA 0", "CA 1" (its class-attention blocks,
the only layers with token maps); the CLS's thumbnails equal to the analysis's rows; a clicked
patch has no row in any layer (every thumbnail blank), and no bug dialog."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from test_ui_window import WAIT_MS, click, drop, new_window, settled, wait_shown
from test_zoo_xcit import tiny_xcit

from vitviz.checkpoints import load_checkpoint
from vitviz.pipeline.analysis import analyze


@pytest.fixture
def xcit_ckpt(tmp_path: Path) -> Path:
    path = tmp_path / "xcit.pth"
    torch.save(tiny_xcit().state_dict(), path)
    path.with_name("xcit.pth.vitviz.json").write_text('{"image_size": 32}')
    return path


@pytest.fixture
def window(qtbot, tmp_path: Path):
    w = new_window(qtbot, tmp_path / "settings.ini")
    bugs: list[str] = []
    w.notifier.bugReported.connect(lambda summary, details: bugs.append(details))
    yield w
    assert not bugs, f"the bug dialog was shown: {bugs}"


def test_the_window_shows_an_xcit(qtbot, window, xcit_ckpt: Path, photo_files) -> None:
    image = photo_files["chelsea"]
    drop(window, [image, xcit_ckpt])
    wait_shown(qtbot, window, image.name)
    v = window.viewer
    a = analyze(load_checkpoint(xcit_ckpt), image)
    assert v.head_grid.row_texts() == ["CA 0", "CA 1"]
    want = a.attention[:, :, 0, 1:].reshape(2, 4, 4, 4).numpy()
    np.testing.assert_allclose(v.maps.head_maps, want, atol=1e-6)
    patch = (2, 1)
    click(v.map_view, v.map_view.vb.mapViewToScene(v.map_view.patch_rect(*patch).center()))
    qtbot.waitUntil(lambda: settled(window) and v.maps.params.query == patch, timeout=WAIT_MS)
    assert np.isnan(v.maps.head_maps).all()


def test_the_cam_layer_picker_offers_every_xcit_block(
    qtbot, window, xcit_ckpt: Path, photo_files
) -> None:
    """The head grid has the class-attention rows only, but a CAM reads any block the accessor
    counts (2 XCA, then 2 class-attention blocks): the picker offers all four, and a map on an
    XCA block's norm1 is the table's."""
    from vitviz.explain.methods import get_method

    image = photo_files["chelsea"]
    drop(window, [image, xcit_ckpt])
    wait_shown(qtbot, window, image.name)
    v = window.viewer
    assert v.head_grid.row_texts() == ["CA 0", "CA 1"]
    picker = v.controls.cam_layer
    offered = [picker.itemData(i) for i in range(picker.count())]
    assert offered[4:] == [f"{b}.{p}" for b in range(4) for p in ("norm1", "norm2", "output")]
    v.controls.select_method("gradcam")
    qtbot.waitUntil(lambda: settled(window) and v.maps.params.method == "gradcam", timeout=WAIT_MS)
    picker.lineEdit().setText("1.norm1")
    picker.lineEdit().editingFinished.emit()
    qtbot.waitUntil(
        lambda: settled(window) and v.maps.params.params().get("layer") == "1.norm1",
        timeout=WAIT_MS,
    )
    a = analyze(load_checkpoint(xcit_ckpt), image)
    want = get_method("gradcam")(a, None, None, {"layer": "1.norm1"}).numpy()
    np.testing.assert_allclose(v.maps.method_map, want, atol=1e-5)
