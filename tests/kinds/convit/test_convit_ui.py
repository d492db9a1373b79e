"""A ConViT in the window: head-grid rows "GPSA 0", "GPSA 1", "SA 0" (counted from 0); the
CLS's thumbnails in the plain layer only (it is not in the GPSA blocks: those rows blank), a
clicked patch's in every layer, each equal to the analysis's attention; the rollout's discard
control says why it is not used and transformer attribution is greyed out."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from test_ui_window import (
    WAIT_MS,
    click,
    drop,
    new_window,
    overlay,
    select_method,
    settled,
    wait_shown,
)
from test_zoo_convit import tiny_convit

from vitviz.checkpoints import load_checkpoint
from vitviz.pipeline.analysis import analyze


@pytest.fixture
def convit_ckpt(tmp_path: Path) -> Path:
    path = tmp_path / "convit.pth"
    torch.save(tiny_convit(seed=3).state_dict(), path)
    return path


@pytest.fixture
def window(qtbot, tmp_path: Path):
    w = new_window(qtbot, tmp_path / "settings.ini")
    bugs: list[str] = []
    w.notifier.bugReported.connect(lambda summary, details: bugs.append(details))
    yield w
    assert not bugs, f"the bug dialog was shown: {bugs}"


def _rows(a, token: int) -> np.ndarray:
    """(L, H, 4, 4) every layer's and head's row of ``token`` over the patches."""
    return a.attention[:, :, token, 1:].reshape(3, 4, 4, 4).numpy()


def test_the_window_shows_a_convit(qtbot, window, convit_ckpt: Path, photo_files) -> None:
    from vitviz.kindapi import get_kind

    image = photo_files["chelsea"]
    drop(window, [image, convit_ckpt])
    wait_shown(qtbot, window, image.name)
    v = window.viewer
    a = analyze(load_checkpoint(convit_ckpt), image)
    assert v.head_grid.row_texts() == ["GPSA 0", "GPSA 1", "SA 0"]
    maps = v.maps.head_maps
    assert np.isnan(maps[:2]).all()  # the CLS is not in the GPSA blocks
    np.testing.assert_allclose(maps[2], _rows(a, 0)[2], atol=1e-6)
    v.controls.select(layer=0, head=1)
    patch = (2, 1)
    centre = v.map_view.vb.mapViewToScene(v.map_view.patch_rect(*patch).center())
    click(v.map_view, centre)
    qtbot.waitUntil(lambda: settled(window) and v.maps.params.query == patch, timeout=WAIT_MS)
    token = 1 + patch[0] * 4 + patch[1]
    np.testing.assert_allclose(v.maps.head_maps, _rows(a, token), atol=1e-6)  # every layer
    assert np.isnan(v.maps.prefix_attention[:2]).all()  # no CLS key in a GPSA layer
    np.testing.assert_allclose(overlay(window), _rows(a, token)[0, 1], atol=1e-6)
    select_method(qtbot, window, "rollout")
    qtbot.waitUntil(lambda: settled(window) and v.maps.params.method == "rollout", timeout=WAIT_MS)
    discard = v.controls.param_panel.widgets["discard_ratio"]
    why = get_kind("convit").implementation("rollout").refusal("discard_ratio")
    assert not discard.isEnabled() and why in discard.toolTip()
    methods = v.controls.method
    assert not methods.model().item(methods.findData("transformer-attribution")).isEnabled()
    assert methods.model().item(methods.findData("relevance")).isEnabled()
