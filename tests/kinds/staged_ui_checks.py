"""Steps the window tests of the staged and multi-branch kinds (CrossViT, VOLO, PiT, MViTv2,
LeViT, TNT, MobileViT, the pyramids) share: an image and a checkpoint shown in the window, a
click on a cell of the input view, and File ▸ Export's npz equal to ``vitviz-cli explain``'s.
Each kind's test keeps its own rows, tokens, maps and methods; the window itself comes from
``window_watch.watched_window`` (no bug dialog shown)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from test_ui_window import WAIT_MS, click, drop, settled, wait_shown

from vitviz.checkpoints import load_checkpoint


def show(qtbot, window, ckpt: Path, image: Path, analyze_kind: Callable[..., Any]) -> Any:
    """``image`` and ``ckpt`` dropped on the window and shown; returns the kind's own analysis
    of the image (``analyze_kind(loaded, image)``), the test's reference."""
    drop(window, [image, ckpt])
    wait_shown(qtbot, window, image.name)
    return analyze_kind(load_checkpoint(ckpt), image)


def click_cell(qtbot, window, cell: tuple[int, int]) -> None:
    """Click ``cell`` (row, column) of the input view and wait for its maps."""
    v = window.viewer
    view = v.input_view
    click(view, view.vb.mapViewToScene(view.patch_rect(*cell).center()))
    qtbot.waitUntil(lambda: settled(window) and v.maps.params.query == cell, timeout=WAIT_MS)


def export_equals_cli(
    qtbot, window, tmp_path: Path, image: Path, ckpt: Path, key: str | None = None
) -> dict[str, np.ndarray]:
    """File ▸ Export's npz of the window holds the same arrays (names, strings, values within
    1e-6) as ``vitviz-cli explain`` writes for ``image`` and ``ckpt``, ``key`` among them;
    returns the window's arrays by name, for the kind's own checks."""
    from vitviz import cli

    target = tmp_path / "window.npz"
    window.export_to(target, "npz")
    qtbot.waitUntil(target.is_file, timeout=WAIT_MS)
    out = tmp_path / "cli"
    assert cli.main(["explain", str(image), "--checkpoint", str(ckpt), "--out", str(out)]) == 0
    with np.load(target) as got, np.load(out / f"{image.stem}.npz") as want:
        assert set(got.files) == set(want.files), (got.files, want.files)
        assert key is None or key in got.files, got.files
        for k in want.files:
            if want[k].dtype.kind in "US":
                assert got[k].tolist() == want[k].tolist(), k
            else:
                np.testing.assert_allclose(got[k], want[k], atol=1e-6, err_msg=k)
        return {k: got[k] for k in got.files}
