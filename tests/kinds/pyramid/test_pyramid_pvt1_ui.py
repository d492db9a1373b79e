"""A transformers PVT v1 in the window: one head-grid row per block with that stage's heads, a
click picks the token of each block's stage covering the cell, the big map of a last-stage
block is that query's row over the grid's keys (its CLS key's share left off), the rollout
starts from the last stage's token, the methods a pyramid ViT can't run are greyed out, and
File ▸ Export writes the CLI's npz (the blocks' CLS counts with it)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_pyramid_hf_pvt1 import saved_pvt1
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

from vitviz.checkpoints import load_checkpoint
from vitviz.explain.methods import get_method
from vitviz.kinds.pyramid.analysis import analyze_pyramid
from vitviz.kinds.pyramid.methods import block_rows
from vitviz.ui.main_window import MainWindow

pytest.importorskip("transformers")


def test_blocks_click_rollout_and_export(qtbot, tmp_path: Path, photo_files) -> None:
    from vitviz import cli

    _, ckpt = saved_pvt1(tmp_path / "pvt", "PvtForImageClassification", seed=4)
    window: MainWindow = new_window(qtbot, tmp_path / "settings.ini")
    bugs: list[str] = []
    window.notifier.bugReported.connect(lambda summary, details: bugs.append(details))
    image = photo_files["chelsea"]
    drop(window, [image, ckpt])
    wait_shown(qtbot, window, image.name)
    ref = analyze_pyramid(load_checkpoint(ckpt), image)
    v = window.viewer
    assert v.head_grid.row_texts() == ["0.0", "1.0", "1.1", "2.0", "3.0", "3.1"]
    assert v.head_grid.row_heads() == [1, 2, 2, 2, 4, 4]
    assert "and the CLS" in v.image.layer_rows[5].tooltip
    assert "CLS" not in v.image.layer_rows[3].tooltip
    v.controls.select(layer=5, head=2)  # the last block: the CLS and a 2×2 grid
    cell = (9, 4)  # centre (38, 18) px: the last stage's token (1, 0)
    view = v.input_view
    click(view, view.vb.mapViewToScene(view.patch_rect(*cell).center()))
    qtbot.waitUntil(lambda: settled(window) and v.maps.params.query == cell, timeout=WAIT_MS)
    assert list(v.maps.query_tokens) == [9 * 16 + 4, 4 * 8 + 2, 4 * 8 + 2, 2 * 4 + 1, 2, 2]
    expected = ref.attentions[5][2, 1 + 2, 1:].double().reshape(2, 2).numpy()
    np.testing.assert_allclose(block_rows(ref, 5, 2).numpy()[2], expected, atol=1e-7)
    np.testing.assert_allclose(overlay(window), expected, atol=1e-6)
    select_method(qtbot, window, "rollout")
    qtbot.waitUntil(lambda: settled(window) and v.maps.params.method == "rollout", timeout=WAIT_MS)
    np.testing.assert_allclose(overlay(window), get_method("rollout")(ref, cell).numpy(), atol=1e-6)
    model = v.controls.method.model()
    assert not model.item(v.controls.method.findData("transformer-attribution")).isEnabled()
    assert model.item(v.controls.method.findData("relevance")).isEnabled()
    target = tmp_path / "window.npz"
    window.export_to(target, "npz")
    qtbot.waitUntil(target.is_file, timeout=WAIT_MS)
    out = tmp_path / "cli"
    assert cli.main(["explain", str(image), "--checkpoint", str(ckpt), "--out", str(out)]) == 0
    with np.load(target) as got, np.load(out / f"{image.stem}.npz") as want:
        assert set(got.files) == set(want.files)
        assert want["block_prefix"].tolist() == [0, 0, 0, 0, 1, 1]
        assert want["attention_3_1"].shape == (4, 5, 5)
        for k in want.files:
            if want[k].dtype.kind in "US":
                assert got[k].tolist() == want[k].tolist(), k
            else:
                np.testing.assert_allclose(got[k], want[k], atol=1e-6, err_msg=k)
    assert not bugs, f"the bug dialog was shown: {bugs}"
