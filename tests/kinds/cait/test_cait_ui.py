"""A CaiT in the window: head-grid rows "SA 0", "SA 1", "CA 0" (counted from 0); the
CLS's thumbnails in the class-attention layer only, a clicked patch's in the self-attention
layers only (the other rows blank: that query has no row there), each equal to the analysis's
attention."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import timm
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
from zoo_helpers import randomize_

from vitviz.checkpoints import load_checkpoint
from vitviz.pipeline.analysis import analyze

ARGS = dict(img_size=32, patch_size=8, embed_dim=32, depth=2, depth_token_only=1, num_heads=4)


@pytest.fixture
def cait_ckpt(tmp_path: Path) -> Path:
    torch.manual_seed(0)
    model = timm.create_model("cait_xxs24_224", pretrained=False, num_classes=5, **ARGS)
    path = tmp_path / "cait.pth"
    torch.save(randomize_(model).state_dict(), path)
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


def test_the_window_shows_a_cait(qtbot, window, cait_ckpt: Path, photo_files) -> None:
    image = photo_files["chelsea"]
    drop(window, [image, cait_ckpt])
    wait_shown(qtbot, window, image.name)
    v = window.viewer
    a = analyze(load_checkpoint(cait_ckpt), image)
    assert v.head_grid.row_texts() == ["SA 0", "SA 1", "CA 0"]
    maps = v.maps.head_maps
    assert np.isnan(maps[:2]).all()  # the CLS is not in the self-attention blocks
    np.testing.assert_allclose(maps[2], _rows(a, 0)[2], atol=1e-6)
    stats = v.image
    assert np.isnan(stats.entropy[:2]).all() and np.isfinite(stats.entropy[2]).all()
    v.controls.select(layer=0, head=1)
    patch = (2, 1)
    centre = v.map_view.vb.mapViewToScene(v.map_view.patch_rect(*patch).center())
    click(v.map_view, centre)
    assert v.query == patch
    qtbot.waitUntil(lambda: settled(window) and v.maps.params.query == patch, timeout=WAIT_MS)
    maps = v.maps.head_maps
    token = 1 + patch[0] * 4 + patch[1]
    np.testing.assert_allclose(maps[:2], _rows(a, token)[:2], atol=1e-6)
    assert np.isnan(maps[2]).all()  # only the CLS queries in class attention
    assert "SA 0" in v.controls.layer.text()
    assert np.isnan(v.maps.prefix_attention[:2]).all()  # no CLS in a self-attention layer
    assert v.controls.prefix_label.text() == "Prefix tokens: none in this layer for this query."
    np.testing.assert_allclose(overlay(window), _rows(a, token)[0, 1], atol=1e-6)
    v.controls.select(layer=2, head=1)  # a class-attention layer: the patch has no row there
    qtbot.waitUntil(lambda: settled(window) and "CA 0" in v.controls.layer.text(), timeout=WAIT_MS)
    assert np.isnan(overlay(window)).all()


def test_the_rollout_says_why_the_discard_ratio_is_not_used(
    qtbot, window, cait_ckpt: Path, photo_files
) -> None:
    """The discard control is disabled with the kind's own reason, and the map's title names only
    the settings the map was made with (no "discard ratio" for a rollout that has none)."""
    from vitviz.kindapi import get_kind

    image = photo_files["chelsea"]
    drop(window, [image, cait_ckpt])
    wait_shown(qtbot, window, image.name)
    select_method(qtbot, window, "rollout")
    v = window.viewer
    qtbot.waitUntil(lambda: settled(window) and v.maps.params.method == "rollout", timeout=WAIT_MS)
    discard = v.controls.param_panel.widgets["discard_ratio"]
    why = get_kind("cait").implementation("rollout").refusal("discard_ratio")
    assert not discard.isEnabled() and why in discard.toolTip()
    title = v.map_view.full_title
    assert title.startswith("Attention rollout") and "head fusion" in title
    assert "discard ratio" not in title
