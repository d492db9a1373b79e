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
from cls_ui_checks import (
    check_discard_refused,
    click_patch,
    open_shown,
    query_rows,
)
from test_ui_window import WAIT_MS, overlay, settled
from window_watch import watched_window
from zoo_helpers import randomize_

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
    yield from watched_window(qtbot, tmp_path)


def _rows(a, token: int) -> np.ndarray:
    return query_rows(a, token, 3)


def test_the_window_shows_a_cait(qtbot, window, cait_ckpt: Path, photo_files) -> None:
    image = photo_files["chelsea"]
    v, a = open_shown(qtbot, window, cait_ckpt, image, ["SA 0", "SA 1", "CA 0"])
    maps = v.maps.head_maps
    assert np.isnan(maps[:2]).all()  # the CLS is not in the self-attention blocks
    np.testing.assert_allclose(maps[2], _rows(a, 0)[2], atol=1e-6)
    stats = v.image
    assert np.isnan(stats.entropy[:2]).all() and np.isfinite(stats.entropy[2]).all()
    v.controls.select(layer=0, head=1)
    token = click_patch(qtbot, window, (2, 1))
    maps = v.maps.head_maps
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
    image = photo_files["chelsea"]
    v, _ = open_shown(qtbot, window, cait_ckpt, image, ["SA 0", "SA 1", "CA 0"])
    check_discard_refused(qtbot, window, "cait")
    title = v.map_view.full_title
    assert title.startswith("Attention rollout") and "head fusion" in title
    assert "discard ratio" not in title
