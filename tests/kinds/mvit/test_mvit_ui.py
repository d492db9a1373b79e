"""An MViTv2 in the window: one head-grid row per block ("1.1") with its stage's heads, a click
picks the query token of each block's stage covering the cell, the big map is that block's query
row over its pooled key grid, the CLS token's share of a block with fewer heads than the most,
the methods an MViTv2 can't run are greyed out, and File ▸ Export writes the CLI's npz."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from mvit_helpers import save_bare, tiny_timm_mvit
from test_ui_window import (
    WAIT_MS,
    click,
    drop,
    new_window,
    overlay,
    settled,
    wait_shown,
)

from vitviz.checkpoints import load_checkpoint
from vitviz.kinds.mvit.analysis import analyze_mvit
from vitviz.kinds.mvit.methods import block_rows
from vitviz.ui.head_grid import MEAN
from vitviz.ui.main_window import MainWindow

pytest.importorskip("timm")


def test_blocks_click_greyed_methods_and_export(qtbot, tmp_path: Path, photo_files) -> None:
    from vitviz import cli

    ckpt = save_bare(tiny_timm_mvit(cls=True, seed=5), tmp_path / "mvit.pth")
    window: MainWindow = new_window(qtbot, tmp_path / "settings.ini")
    bugs: list[str] = []
    window.notifier.bugReported.connect(lambda summary, details: bugs.append(details))
    image = photo_files["chelsea"]
    drop(window, [image, ckpt])
    wait_shown(qtbot, window, image.name)
    ref = analyze_mvit(load_checkpoint(ckpt), image)
    v = window.viewer
    assert v.head_grid.row_texts() == ["0.0", "1.0", "1.1", "2.0", "3.0"]
    assert v.head_grid.row_heads() == [1, 2, 2, 4, 8]
    v.controls.select(layer=2, head=1)  # block 1.1: 8×8 queries over 4×4 pooled keys
    cell = (9, 2)
    view = v.input_view
    click(view, view.vb.mapViewToScene(view.patch_rect(*cell).center()))
    qtbot.waitUntil(lambda: settled(window) and v.maps.params.query == cell, timeout=WAIT_MS)
    assert list(v.maps.query_tokens) == [9 * 16 + 2, 4 * 8 + 1, 4 * 8 + 1, 2 * 4 + 0, 1 * 2 + 0]
    expected = block_rows(ref, 2, cell).numpy()[1]
    assert expected.shape == (4, 4)
    np.testing.assert_allclose(overlay(window), expected, atol=1e-6)
    v.controls.select(layer=0, head=MEAN)  # block 0.0: 1 of the 8 heads a block has at most
    qtbot.waitUntil(lambda: settled(window), timeout=WAIT_MS)
    share = ref.attentions[0][:, 1 + v.maps.query_tokens[0], 0].mean()
    assert f"{float(share):.1%} of this query's attention" in v.controls.prefix_label.text()
    model = v.controls.method.model()
    for name in ("rollout", "relevance", "grad-sam", "dino-masks"):
        assert not model.item(v.controls.method.findData(name)).isEnabled(), name
    assert model.item(v.controls.method.findData("gradcam")).isEnabled()
    target = tmp_path / "window.npz"
    window.export_to(target, "npz")
    qtbot.waitUntil(target.is_file, timeout=WAIT_MS)
    out = tmp_path / "cli"
    assert cli.main(["explain", str(image), "--checkpoint", str(ckpt), "--out", str(out)]) == 0
    with np.load(target) as got, np.load(out / f"{image.stem}.npz") as want:
        assert set(got.files) == set(want.files) and "attention_1_1" in got.files
        assert got["key_grids"].tolist() == [[4, 4], [8, 8], [4, 4], [8, 8], [4, 4]]
        for k in want.files:
            if want[k].dtype.kind in "US":
                assert got[k].tolist() == want[k].tolist(), k
            else:
                np.testing.assert_allclose(got[k], want[k], atol=1e-6, err_msg=k)
    assert not bugs, f"the bug dialog was shown: {bugs}"
