"""Steps the window tests of the CLS-token kinds (CaiT, ConViT, XCiT) share: opening an image
with a checkpoint, clicking a patch, and the rollout's disabled discard control. Each kind's
test keeps its own rows and expectations; its window is ``window_watch.watched_window``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from test_ui_window import WAIT_MS, click, drop, select_method, settled, wait_shown

from vitviz.checkpoints import load_checkpoint
from vitviz.pipeline.analysis import analyze


def query_rows(a, token: int, layers: int, heads: int = 4) -> np.ndarray:
    """(L, H, 4, 4) every layer's and head's row of ``token`` over the 4 × 4 patches."""
    return a.attention[:, :, token, 1:].reshape(layers, heads, 4, 4).numpy()


def open_shown(qtbot, window, ckpt: Path, image: Path, rows: list[str]):
    """``image`` and ``ckpt`` dropped on the window and shown, its head grid's rows ``rows``;
    returns (the viewer, the analysis of the image)."""
    drop(window, [image, ckpt])
    wait_shown(qtbot, window, image.name)
    v = window.viewer
    a = analyze(load_checkpoint(ckpt), image)
    assert v.head_grid.row_texts() == rows
    return v, a


def click_patch(qtbot, window, patch: tuple[int, int]) -> int:
    """Click ``patch`` (row, column) of the 4 × 4 map, wait for its maps; returns its token."""
    v = window.viewer
    click(v.map_view, v.map_view.vb.mapViewToScene(v.map_view.patch_rect(*patch).center()))
    assert v.query == patch
    qtbot.waitUntil(lambda: settled(window) and v.maps.params.query == patch, timeout=WAIT_MS)
    return 1 + patch[0] * 4 + patch[1]


def check_discard_refused(qtbot, window, kind: str) -> None:
    """With the rollout shown, its discard control is disabled with ``kind``'s own reason."""
    from vitviz.kindapi import get_kind

    select_method(qtbot, window, "rollout")
    v = window.viewer
    qtbot.waitUntil(lambda: settled(window) and v.maps.params.method == "rollout", timeout=WAIT_MS)
    discard = v.controls.param_panel.widgets["discard_ratio"]
    why = get_kind(kind).implementation("rollout").refusal("discard_ratio")
    assert not discard.isEnabled() and why in discard.toolTip()
