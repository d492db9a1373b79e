"""A PiT in the window: one head-grid row per block ("1.1") with its stage's heads, a click
picks the patch of each block's stage covering the cell, the big map is that block's query row
on its stage's grid, the prefix tokens' share of a block with fewer heads than the most, the
rollout is the kind's, the methods a PiT can't run are greyed out, and File ▸ Export writes the
CLI's npz."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pit_helpers import save_folder, tiny_timm_pit
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
from vitviz.kinds.pit.analysis import analyze_pit
from vitviz.kinds.pit.methods import block_rows
from vitviz.ui.head_grid import MEAN
from vitviz.ui.main_window import MainWindow

pytest.importorskip("timm")


def test_blocks_click_rollout_and_export(qtbot, tmp_path: Path, photo_files) -> None:
    from vitviz import cli

    ckpt = save_folder(tiny_timm_pit(distilled=True, seed=5), tmp_path / "pit")
    window: MainWindow = new_window(qtbot, tmp_path / "settings.ini")
    bugs: list[str] = []
    window.notifier.bugReported.connect(lambda summary, details: bugs.append(details))
    image = photo_files["chelsea"]
    drop(window, [image, ckpt])
    wait_shown(qtbot, window, image.name)
    ref = analyze_pit(load_checkpoint(ckpt), image)
    v = window.viewer
    assert v.head_grid.row_texts() == ["0.0", "1.0", "1.1", "2.0"]
    assert v.head_grid.row_heads() == [2, 2, 2, 4]
    v.controls.select(layer=2, head=1)  # block 1.1: stage 1's 3×3 grid
    cell = (4, 1)
    view = v.input_view
    click(view, view.vb.mapViewToScene(view.patch_rect(*cell).center()))
    qtbot.waitUntil(lambda: settled(window) and v.maps.params.query == cell, timeout=WAIT_MS)
    assert list(v.maps.query_tokens) == [4 * 5 + 1, 2 * 3 + 0, 2 * 3 + 0, 1 * 2 + 0]
    expected = block_rows(ref, 2, cell).numpy()[1]
    assert expected.shape == (3, 3)
    np.testing.assert_allclose(overlay(window), expected, atol=1e-6)
    v.controls.select(layer=0, head=MEAN)  # block 0.0: 2 of the 4 heads a block has at most
    qtbot.waitUntil(lambda: settled(window), timeout=WAIT_MS)
    row = ref.attentions[0][:, 2 + v.maps.query_tokens[0], :2].sum(dim=-1).mean()
    assert f"{float(row):.1%} of this query's attention" in v.controls.prefix_label.text()
    select_method(qtbot, window, "rollout")
    qtbot.waitUntil(lambda: settled(window) and v.maps.params.method == "rollout", timeout=WAIT_MS)
    np.testing.assert_allclose(overlay(window), get_method("rollout")(ref, cell).numpy(), atol=1e-6)
    model = v.controls.method.model()
    assert not model.item(v.controls.method.findData("grad-sam")).isEnabled()
    assert model.item(v.controls.method.findData("relevance")).isEnabled()
    target = tmp_path / "window.npz"
    window.export_to(target, "npz")
    qtbot.waitUntil(target.is_file, timeout=WAIT_MS)
    out = tmp_path / "cli"
    assert cli.main(["explain", str(image), "--checkpoint", str(ckpt), "--out", str(out)]) == 0
    with np.load(target) as got, np.load(out / f"{image.stem}.npz") as want:
        assert set(got.files) == set(want.files) and "attention_1_1" in got.files
        for k in want.files:
            if want[k].dtype.kind in "US":
                assert got[k].tolist() == want[k].tolist(), k
            else:
                np.testing.assert_allclose(got[k], want[k], atol=1e-6, err_msg=k)
    assert not bugs, f"the bug dialog was shown: {bugs}"
