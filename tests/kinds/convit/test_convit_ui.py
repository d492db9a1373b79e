"""A ConViT in the window: head-grid rows "GPSA 0", "GPSA 1", "SA 0" (counted from 0); the
CLS's thumbnails in the plain layer only (it is not in the GPSA blocks: those rows blank), a
clicked patch's in every layer, each equal to the analysis's attention; the rollout's discard
control says why it is not used and transformer attribution is greyed out."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from cls_ui_checks import (
    check_discard_refused,
    click_patch,
    open_shown,
    query_rows,
)
from test_ui_window import overlay
from test_zoo_convit import tiny_convit
from window_watch import watched_window


@pytest.fixture
def convit_ckpt(tmp_path: Path) -> Path:
    path = tmp_path / "convit.pth"
    torch.save(tiny_convit(seed=3).state_dict(), path)
    return path


@pytest.fixture
def window(qtbot, tmp_path: Path):
    yield from watched_window(qtbot, tmp_path)


def _rows(a, token: int) -> np.ndarray:
    return query_rows(a, token, 3)


def test_the_window_shows_a_convit(qtbot, window, convit_ckpt: Path, photo_files) -> None:
    image = photo_files["chelsea"]
    v, a = open_shown(qtbot, window, convit_ckpt, image, ["GPSA 0", "GPSA 1", "SA 0"])
    maps = v.maps.head_maps
    assert np.isnan(maps[:2]).all()  # the CLS is not in the GPSA blocks
    np.testing.assert_allclose(maps[2], _rows(a, 0)[2], atol=1e-6)
    v.controls.select(layer=0, head=1)
    token = click_patch(qtbot, window, (2, 1))
    np.testing.assert_allclose(v.maps.head_maps, _rows(a, token), atol=1e-6)  # every layer
    assert np.isnan(v.maps.prefix_attention[:2]).all()  # no CLS key in a GPSA layer
    np.testing.assert_allclose(overlay(window), _rows(a, token)[0, 1], atol=1e-6)
    check_discard_refused(qtbot, window, "convit")
    methods = v.controls.method
    assert not methods.model().item(methods.findData("transformer-attribution")).isEnabled()
    assert methods.model().item(methods.findData("relevance")).isEnabled()
