"""A MobileViT in the window: one head-grid row per transformer layer ("0.1": MobileViT block
0's second layer) with its heads, a click picks the feature pixel of each layer's stage under
the cell (its offset in its 2×2 patch and its patch), the big map is that offset's row over
the stage's patch grid, the methods a MobileViT can't run are greyed out, and File ▸ Export
writes the CLI's npz."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from mobilevit_helpers import BARE_SETTINGS, save_bare, tiny_timm_mobilevit
from test_ui_window import WAIT_MS, click, drop, new_window, overlay, settled, wait_shown

from vitviz.checkpoints import load_checkpoint
from vitviz.kinds.mobilevit.analysis import analyze_mobilevit
from vitviz.kinds.mobilevit.methods import layer_rows
from vitviz.ui.main_window import MainWindow

pytest.importorskip("timm")


def test_layers_click_and_export(qtbot, tmp_path: Path, photo_files) -> None:
    from vitviz import cli

    ckpt = save_bare(tiny_timm_mobilevit(seed=5), tmp_path / "mvit.pth", BARE_SETTINGS)
    window: MainWindow = new_window(qtbot, tmp_path / "settings.ini")
    bugs: list[str] = []
    window.notifier.bugReported.connect(lambda summary, details: bugs.append(details))
    image = photo_files["chelsea"]
    drop(window, [image, ckpt])
    wait_shown(qtbot, window, image.name)
    ref = analyze_mobilevit(load_checkpoint(ckpt), image)
    v = window.viewer
    assert v.head_grid.row_texts() == ["0.0", "0.1", "1.0"]
    assert v.head_grid.row_heads() == [2, 2, 2]
    # at the preprocessing's 256 px: block 0's stage 32×32 pixels of 8 px (the clickable
    # cells) in 16×16 patches, block 1's 16×16 pixels of 16 px in 8×8 patches
    v.controls.select(layer=2, head=1)  # layer 1.0
    cell = (5, 2)  # in layer 1.0 pixel (2, 1): offset (0, 1) of patch (1, 0)
    view = v.input_view
    click(view, view.vb.mapViewToScene(view.patch_rect(*cell).center()))
    qtbot.waitUntil(lambda: settled(window) and v.maps.params.query == cell, timeout=WAIT_MS)
    assert list(v.maps.query_tokens) == [2 * 16 + 1, 2 * 16 + 1, 1 * 8 + 0]
    assert ref.offset_and_patch(2, cell) == (1, 8)
    expected = layer_rows(ref, 2, cell).numpy()[1]
    assert expected.shape == (8, 8)
    np.testing.assert_allclose(overlay(window), expected, atol=1e-6)
    model = v.controls.method.model()
    for name in ("rollout", "relevance", "dino-masks"):
        assert not model.item(v.controls.method.findData(name)).isEnabled()
    assert model.item(v.controls.method.findData("gradcam")).isEnabled()
    target = tmp_path / "window.npz"
    window.export_to(target, "npz")
    qtbot.waitUntil(target.is_file, timeout=WAIT_MS)
    out = tmp_path / "cli"
    assert cli.main(["explain", str(image), "--checkpoint", str(ckpt), "--out", str(out)]) == 0
    with np.load(target) as got, np.load(out / f"{image.stem}.npz") as want:
        assert set(got.files) == set(want.files) and "attention_0_1" in got.files
        assert got["attention_1_0"].shape == (2, 4, 64, 64)
        for k in want.files:
            if want[k].dtype.kind in "US":
                assert got[k].tolist() == want[k].tolist(), k
            else:
                np.testing.assert_allclose(got[k], want[k], atol=1e-6, err_msg=k)
    assert not bugs, f"the bug dialog was shown: {bugs}"
