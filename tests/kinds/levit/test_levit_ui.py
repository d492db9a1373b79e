"""A LeViT in the window: one head-grid row per attention layer ("1.0" the subsample that
starts stage 1) with its heads, a click picks the token of each layer's stage covering the
cell, the big map of a subsample is its query row over the finer grid of its keys, the rollout
is the kind's, the methods a LeViT can't run are greyed out, and File ▸ Export writes the CLI's
npz."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from levit_helpers import save_folder, tiny_timm_levit
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
from vitviz.kinds.levit.analysis import analyze_levit
from vitviz.kinds.levit.methods import block_rows
from vitviz.ui.main_window import MainWindow

pytest.importorskip("timm")


def test_layers_click_rollout_and_export(qtbot, tmp_path: Path, photo_files) -> None:
    from vitviz import cli

    ckpt = save_folder(tiny_timm_levit(distilled=True, seed=5, size=96), tmp_path / "levit")
    window: MainWindow = new_window(qtbot, tmp_path / "settings.ini")
    bugs: list[str] = []
    window.notifier.bugReported.connect(lambda summary, details: bugs.append(details))
    image = photo_files["chelsea"]
    drop(window, [image, ckpt])
    wait_shown(qtbot, window, image.name)
    ref = analyze_levit(load_checkpoint(ckpt), image)
    v = window.viewer
    assert v.head_grid.row_texts() == ["0.0", "1.0", "1.1", "1.2", "2.0", "2.1"]
    assert v.head_grid.row_heads() == [2, 4, 3, 3, 6, 4]
    v.controls.select(layer=1, head=1)  # the subsample: 3×3 queries over stage 0's 6×6 keys
    cell = (4, 1)
    view = v.input_view
    click(view, view.vb.mapViewToScene(view.patch_rect(*cell).center()))
    qtbot.waitUntil(lambda: settled(window) and v.maps.params.query == cell, timeout=WAIT_MS)
    assert list(v.maps.query_tokens) == [25, 6, 6, 6, 2, 2]
    expected = block_rows(ref, 1, 6).numpy()[1]
    assert expected.shape == (6, 6)
    np.testing.assert_allclose(overlay(window), expected, atol=1e-6)
    select_method(qtbot, window, "rollout")
    qtbot.waitUntil(lambda: settled(window) and v.maps.params.method == "rollout", timeout=WAIT_MS)
    np.testing.assert_allclose(overlay(window), get_method("rollout")(ref, cell).numpy(), atol=1e-6)
    model = v.controls.method.model()
    for name in ("dino-masks", "grad-sam", "attention-gradcam", "transformer-attribution"):
        assert not model.item(v.controls.method.findData(name)).isEnabled(), name
    assert model.item(v.controls.method.findData("relevance")).isEnabled()
    target = tmp_path / "window.npz"
    window.export_to(target, "npz")
    qtbot.waitUntil(target.is_file, timeout=WAIT_MS)
    out = tmp_path / "cli"
    assert cli.main(["explain", str(image), "--checkpoint", str(ckpt), "--out", str(out)]) == 0
    with np.load(target) as got, np.load(out / f"{image.stem}.npz") as want:
        assert set(got.files) == set(want.files) and "attention_1_0" in got.files
        assert got["attention_1_0"].shape == (4, 9, 36)
        for k in want.files:
            if want[k].dtype.kind in "US":
                assert got[k].tolist() == want[k].tolist(), k
            else:
                np.testing.assert_allclose(got[k], want[k], atol=1e-6, err_msg=k)
    assert not bugs, f"the bug dialog was shown: {bugs}"
