"""An XCiT in the window: head-grid rows "CA 0", "CA 1" (its class-attention blocks,
the only layers with token maps); the CLS's thumbnails equal to the analysis's rows; a clicked
patch has no row in any layer (every thumbnail blank), and no bug dialog."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from cls_ui_checks import click_patch, open_shown, query_rows
from test_ui_window import WAIT_MS, settled
from test_zoo_xcit import tiny_xcit
from window_watch import watched_window


@pytest.fixture
def xcit_ckpt(tmp_path: Path) -> Path:
    path = tmp_path / "xcit.pth"
    torch.save(tiny_xcit().state_dict(), path)
    path.with_name("xcit.pth.vitviz.json").write_text('{"image_size": 32}')
    return path


@pytest.fixture
def window(qtbot, tmp_path: Path):
    yield from watched_window(qtbot, tmp_path)


def test_the_window_shows_an_xcit(qtbot, window, xcit_ckpt: Path, photo_files) -> None:
    image = photo_files["chelsea"]
    v, a = open_shown(qtbot, window, xcit_ckpt, image, ["CA 0", "CA 1"])
    np.testing.assert_allclose(v.maps.head_maps, query_rows(a, 0, 2), atol=1e-6)
    click_patch(qtbot, window, (2, 1))
    assert np.isnan(v.maps.head_maps).all()


def test_the_cam_layer_picker_offers_every_xcit_block(
    qtbot, window, xcit_ckpt: Path, photo_files
) -> None:
    """The head grid has the class-attention rows only, but a CAM reads any block the accessor
    counts (2 XCA, then 2 class-attention blocks): the picker offers all four, and a map on an
    XCA block's norm1 is the table's."""
    from vitviz.explain.methods import get_method

    image = photo_files["chelsea"]
    v, a = open_shown(qtbot, window, xcit_ckpt, image, ["CA 0", "CA 1"])
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
    want = get_method("gradcam")(a, None, None, {"layer": "1.norm1"}).numpy()
    np.testing.assert_allclose(v.maps.method_map, want, atol=1e-5)
