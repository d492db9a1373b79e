"""A VOLO in the window: one head-grid row per attention layer ("0.0", "1.0", "cls.0") with its
heads, a click picks the cell itself in an outlooker (its row of the folded window weights on
the 8×8 grid) and the half-grid token under it in a transformer block, a class block keeps its
CLS query, the methods a VOLO can't run are greyed out, and
File ▸ Export writes the CLI's npz."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_ui_window import WAIT_MS, click, drop, new_window, overlay, settled, wait_shown
from volo_helpers import save_folder, tiny_timm_volo

from vitviz.checkpoints import load_checkpoint
from vitviz.kinds.volo.analysis import analyze_volo
from vitviz.kinds.volo.methods import layer_rows
from vitviz.ui.main_window import MainWindow

pytest.importorskip("timm")


def test_layers_click_class_block_and_export(qtbot, tmp_path: Path, photo_files) -> None:
    from vitviz import cli

    ckpt = save_folder(tiny_timm_volo(seed=5), tmp_path / "volo")
    window: MainWindow = new_window(qtbot, tmp_path / "settings.ini")
    bugs: list[str] = []
    window.notifier.bugReported.connect(lambda summary, details: bugs.append(details))
    image = photo_files["chelsea"]
    drop(window, [image, ckpt])
    wait_shown(qtbot, window, image.name)
    ref = analyze_volo(load_checkpoint(ckpt), image)
    v = window.viewer
    assert v.head_grid.row_texts() == ["0.0", "0.1", "1.0", "2.0", "3.0", "cls.0", "cls.1"]
    assert v.head_grid.row_heads() == [6, 6, 12, 12, 12, 12, 12]
    v.controls.select(layer=1, head=2)  # the second outlooker, on the 8×8 grid
    cell = (5, 2)
    view = v.input_view
    click(view, view.vb.mapViewToScene(view.patch_rect(*cell).center()))
    qtbot.waitUntil(lambda: settled(window) and v.maps.params.query == cell, timeout=WAIT_MS)
    assert list(v.maps.query_tokens) == [42, 42, 9, 9, 9, -1, -1]
    np.testing.assert_allclose(overlay(window), layer_rows(ref, 1, cell).numpy()[2], atol=1e-6)
    v.controls.select(layer=3, head=4)  # a transformer block: the 4×4 token (2, 1)
    qtbot.waitUntil(lambda: settled(window), timeout=WAIT_MS)
    np.testing.assert_allclose(overlay(window), layer_rows(ref, 3, cell).numpy()[4], atol=1e-6)
    v.controls.select(layer=6, head=0)  # cls.1: the CLS over the 4×4 patches
    qtbot.waitUntil(lambda: settled(window), timeout=WAIT_MS)
    cls_row = ref.attentions[6][0, 0, 1:].reshape(4, 4).numpy()
    np.testing.assert_allclose(overlay(window), cls_row, atol=1e-6)
    model = v.controls.method.model()
    for name, enabled in (("rollout", False), ("dino-masks", False), ("gradcam", True)):
        assert model.item(v.controls.method.findData(name)).isEnabled() == enabled, name
    target = tmp_path / "window.npz"
    window.export_to(target, "npz")
    qtbot.waitUntil(target.is_file, timeout=WAIT_MS)
    out = tmp_path / "cli"
    assert cli.main(["explain", str(image), "--checkpoint", str(ckpt), "--out", str(out)]) == 0
    with np.load(target) as got, np.load(out / f"{image.stem}.npz") as want:
        assert set(got.files) == set(want.files) and "window_cells" in got.files
        for k in want.files:
            if want[k].dtype.kind in "US":
                assert got[k].tolist() == want[k].tolist(), k
            else:
                np.testing.assert_allclose(got[k], want[k], atol=1e-6, err_msg=k)
    assert not bugs, f"the bug dialog was shown: {bugs}"
