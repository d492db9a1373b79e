"""A TNT in the window: one head-grid row per block ("0", "1") with its outer heads, a click
picks the patch, the big map is that block's outer attention row over the patch grid, the CLS
token's share, transformer attribution greyed out and the ViT's other methods offered, and
File ▸ Export writes the CLI's npz."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_ui_window import (
    WAIT_MS,
    click,
    drop,
    new_window,
    overlay,
    settled,
    wait_shown,
)
from tnt_helpers import SETTINGS, save_bare, tiny_timm_tnt

from vitviz.checkpoints import load_checkpoint
from vitviz.kinds.tnt.analysis import analyze_tnt
from vitviz.kinds.tnt.methods import block_rows
from vitviz.ui.main_window import MainWindow

pytest.importorskip("timm")


def test_blocks_click_greyed_methods_and_export(qtbot, tmp_path: Path, photo_files) -> None:
    from vitviz import cli

    ckpt = save_bare(tiny_timm_tnt(seed=5), tmp_path / "tnt.pth", SETTINGS)
    window: MainWindow = new_window(qtbot, tmp_path / "settings.ini")
    bugs: list[str] = []
    window.notifier.bugReported.connect(lambda summary, details: bugs.append(details))
    image = photo_files["chelsea"]
    drop(window, [image, ckpt])
    wait_shown(qtbot, window, image.name)
    ref = analyze_tnt(load_checkpoint(ckpt), image)
    v = window.viewer
    assert v.head_grid.row_texts() == ["0", "1"]
    assert v.head_grid.row_heads() == [4, 4]
    v.controls.select(layer=1, head=3)
    cell = (2, 1)
    view = v.input_view
    click(view, view.vb.mapViewToScene(view.patch_rect(*cell).center()))
    qtbot.waitUntil(lambda: settled(window) and v.maps.params.query == cell, timeout=WAIT_MS)
    assert list(v.maps.query_tokens) == [2 * 4 + 1] * 2
    expected = block_rows(ref, 1, cell).numpy()[3]
    assert expected.shape == (4, 4)
    np.testing.assert_allclose(overlay(window), expected, atol=1e-6)
    share = ref.attentions[1][3, 1 + 2 * 4 + 1, 0]
    assert f"{float(share):.1%} of this query's attention" in v.controls.prefix_label.text()
    model = v.controls.method.model()
    assert not model.item(v.controls.method.findData("transformer-attribution")).isEnabled()
    for name in ("rollout", "relevance", "grad-sam", "dino-masks", "gradcam"):
        assert model.item(v.controls.method.findData(name)).isEnabled(), name
    target = tmp_path / "window.npz"
    window.export_to(target, "npz")
    qtbot.waitUntil(target.is_file, timeout=WAIT_MS)
    out = tmp_path / "cli"
    assert cli.main(["explain", str(image), "--checkpoint", str(ckpt), "--out", str(out)]) == 0
    with np.load(target) as got, np.load(out / f"{image.stem}.npz") as want:
        assert set(got.files) == set(want.files) and "attention_1" in got.files
        assert got["grid"].tolist() == [4, 4] and got["pixel_grid"].tolist() == [2, 2]
        for k in want.files:
            if want[k].dtype.kind in "US":
                assert got[k].tolist() == want[k].tolist(), k
            else:
                np.testing.assert_allclose(got[k], want[k], atol=1e-6, err_msg=k)
    assert not bugs, f"the bug dialog was shown: {bugs}"
