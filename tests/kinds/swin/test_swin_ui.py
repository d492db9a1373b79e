"""A Swin in the window: one head-grid row per block ("1.2 SW") with that stage's heads, a click
picks ``token_at``'s token in every block, the thumbnails and the big map are ``query_row`` of
that token, the window partition is outlined, the rollout is ``analyze_swin``'s; a ViT dropped
afterwards shows as before."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from staged_ui_checks import click_cell
from swin_helpers import tiny_torchvision_swin
from test_ui_window import (
    WAIT_MS,
    drop,
    new_window,
    overlay,
    select_method,
    settled,
    wait_shown,
)

from vitviz.checkpoints import load_checkpoint
from vitviz.kindapi import get_kind
from vitviz.kinds.swin.analysis import analyze_swin
from vitviz.kinds.swin.attention import query_row, token_at
from vitviz.pipeline.analysis import analyze
from vitviz.ui.head_grid import MEAN
from vitviz.ui.main_window import MainWindow
from vitviz.ui.window_outline import partition_segments

SIZE = 64  # input pixels: stage grids 16×16 (window 4) and 8×8


@pytest.fixture
def swin_ckpt(tmp_path: Path) -> Path:
    path = tmp_path / "swin_tiny.pth"
    torch.save(tiny_torchvision_swin().state_dict(), path)
    sidecar = path.with_name(path.name + ".vitviz.json")
    sidecar.write_text(json.dumps({"preprocessing": {"image_size": [SIZE, SIZE]}}))
    return path


@pytest.fixture
def swin_shown(qtbot, tmp_path: Path, swin_ckpt: Path, photo_files):
    window: MainWindow = new_window(qtbot, tmp_path / "settings.ini")
    bugs: list[str] = []
    window.notifier.bugReported.connect(lambda summary, details: bugs.append(details))
    image = photo_files["chelsea"]
    drop(window, [image, swin_ckpt])
    wait_shown(qtbot, window, image.name)
    yield window, analyze_swin(load_checkpoint(swin_ckpt), image)
    assert not bugs, f"the bug dialog was shown: {bugs}"


def _rows(ref, block: int, token: int) -> np.ndarray:
    layout = ref.layouts[block]
    return query_row(ref.attentions[block], layout, token).numpy().reshape(-1, *layout.grid)


def test_rows_are_blocks_with_their_heads(swin_shown) -> None:
    window, ref = swin_shown
    grid = window.viewer.head_grid
    assert grid.row_texts() == ["0.0 W", "0.1 SW", "1.0 W", "1.1 SW"]
    assert grid.row_heads() == [int(a.shape[1]) for a in ref.attentions] == [2, 2, 4, 4]
    ctl = window.viewer.controls
    ctl.select(layer=1, head=MEAN)
    assert ctl.head.count() == 1 + 2 and "0.1 SW" in ctl.layer.text()
    ctl.select(layer=3, head=3)
    assert ctl.head.count() == 1 + 4 and ctl.selected_head() == 3
    stats = window.viewer.image
    assert np.isnan(stats.mean_distance[:2, 2:]).all()
    assert np.isfinite(stats.mean_distance[2:]).all()
    plot = window.viewer.stats.plots["distance"]
    assert plot.getAxis("bottom").labelText == "block (stage.block)"
    (dots,) = plot.listDataItems()
    _, y = dots.getData()
    assert len(y) == 2 + 2 + 4 + 4  # one dot per head of each block, none for missing heads
    np.testing.assert_allclose(
        np.sort(y), np.sort(stats.mean_distance[np.isfinite(stats.mean_distance)])
    )


def test_click_picks_token_at_in_every_block(qtbot, swin_shown) -> None:
    window, ref = swin_shown
    v = window.viewer
    v.controls.select(layer=1, head=1)  # an SW-MSA block
    cell = (6, 3)
    click_cell(qtbot, window, cell)
    point = ((cell[0] + 0.5) * 4, (cell[1] + 0.5) * 4)
    m = v.maps
    for b, layout in enumerate(ref.layouts):
        px = 4 * 2 ** ref.block_stages[b]
        token = token_at(layout, px, point)
        assert m.query_tokens[b] == token
        rows = _rows(ref, b, token)
        ys = np.minimum((np.arange(16) * 4 + 2) // px, layout.grid[0] - 1)
        xs = np.minimum((np.arange(16) * 4 + 2) // px, layout.grid[1] - 1)
        heads = rows.shape[0]
        np.testing.assert_allclose(
            m.head_maps[b, :heads], rows[:, ys[:, None], xs[None, :]], atol=1e-6
        )
    np.testing.assert_allclose(overlay(window), _rows(ref, 1, m.query_tokens[1])[1], atol=1e-6)
    assert "SW-MSA" in v.map_view.full_title and "head 1 of 0–1" in v.map_view.full_title
    ids = v.image.token_geometry.layers[1].windows
    expected = partition_segments(ids) * 4
    assert v.map_view.window_lines.path().elementCount() == 2 * len(expected)
    assert not v.map_view.query_window.path().isEmpty()
    # the big map shows the photo itself, the model input's region in it, and the partition
    # and the query's token drawn over that region, scaled from input pixels
    assert v.map_view.image.image.shape == (*ref.source.size[::-1], 3)
    left, top, right, bottom = v.image.region
    assert (left, top, right, bottom) == pytest.approx(ref.geometry.region)
    bounds = v.map_view.window_lines.path().boundingRect()
    assert (bounds.left(), bounds.top(), bounds.right(), bounds.bottom()) == pytest.approx(
        (left, top, right, bottom)
    )
    token = m.query_tokens[1]
    px = 4 * 2 ** ref.block_stages[1]
    r, c = divmod(token, ref.layouts[1].grid[1])
    sx, sy = (right - left) / SIZE, (bottom - top) / SIZE
    rect = v.map_view.query_box.rect()
    assert (rect.left(), rect.top()) == pytest.approx((left + c * px * sx, top + r * px * sy))


def test_rollout_map_and_then_a_vit(qtbot, swin_shown, tiny_ckpt: Path, photo_files) -> None:
    window, ref = swin_shown
    v = window.viewer
    select_method(qtbot, window, "rollout")
    qtbot.waitUntil(lambda: settled(window) and v.maps.params.method == "rollout", timeout=WAIT_MS)
    np.testing.assert_allclose(overlay(window), ref.rollout().numpy(), atol=1e-6)
    assert v.map_view.window_lines.path().isEmpty()  # the partition belongs to attention maps
    assert "from the average pool" in v.map_view.full_title
    assert v.controls.query_reset.text() == "Reset to the mean"  # a Swin has no CLS token
    panel = v.controls.param_panel.widgets
    assert panel["fusion"].isEnabled() and not panel["discard_ratio"].isEnabled()
    assert not panel["start_layer"].isEnabled()  # the ViT's settings, not taken by a Swin
    why = (
        get_kind("swin").implementation("rollout").refusal("discard_ratio")
    )  # the kind's own reason
    assert why in panel["discard_ratio"].toolTip()
    assert not v.controls.method.model().item(v.controls.method.findData("relevance")).isEnabled()
    image = photo_files["chelsea"]
    drop(window, [tiny_ckpt])
    qtbot.waitUntil(
        lambda: (
            settled(window)
            and v.image.token_geometry.layers[0].windows is None
            and v.maps.params.method == "rollout"
        ),
        timeout=WAIT_MS,
    )
    vit = analyze(load_checkpoint(tiny_ckpt), image)
    np.testing.assert_allclose(overlay(window), vit.rollout().numpy(), atol=1e-5)
    assert v.head_grid.row_texts()[0] == "L0"
    assert v.controls.query_reset.text() == "Reset to CLS"
    assert v.map_view.window_lines.path().isEmpty()
    assert v.controls.head.count() == 1 + vit.num_heads
    panel = v.controls.param_panel.widgets
    assert panel["discard_ratio"].isEnabled() and panel["start_layer"].isEnabled()


def test_model_info_shows_the_stages(qtbot, swin_shown, swin_ckpt: Path) -> None:
    """Model ▸ Model and preprocessing on a Swin: its stages, not a ViT's "dim ?"."""
    from PySide6.QtWidgets import QPlainTextEdit

    window, _ = swin_shown
    window.act_model_info.trigger()
    facts = window.info_dialog.findChild(QPlainTextEdit).toPlainText()
    cfg = load_checkpoint(swin_ckpt).model.config
    assert "dim ?" not in facts and "layers × heads" not in facts, facts
    depths = "-".join(map(str, cfg.depths))
    assert (
        f"Swin (v1), {len(cfg.depths)} stages, {sum(cfg.depths)} blocks (depths {depths})" in facts
    )
    size = "×".join(map(str, cfg.image_size))
    assert f"patch {cfg.patch_size}, embed dim {cfg.dims[0]}, trained at {size}" in facts
    assert f"images prepared at {SIZE}×{SIZE}" in facts
    for s in range(len(cfg.depths)):
        line = (
            f"stage {s}: {cfg.depths[s]} blocks, width {cfg.dims[s]}, {cfg.heads[s]} heads, "
            f"window {cfg.window_sizes[s]}"
        )
        assert line in facts.splitlines(), facts
    window.info_dialog.reject()


def test_model_info_of_a_swin_v2(qtbot, tmp_path: Path) -> None:
    from PySide6.QtWidgets import QPlainTextEdit

    from vitviz.ui.model_info_dialog import ModelInfoDialog
    from vitviz.workers import jobs

    path = tmp_path / "swin_v2.pth"
    torch.save(tiny_torchvision_swin(version=2).state_dict(), path)
    loaded = load_checkpoint(path)
    dialog = ModelInfoDialog(jobs.summarize(loaded, "cpu"))
    qtbot.addWidget(dialog)
    facts = dialog.findChild(QPlainTextEdit).toPlainText()
    assert loaded.model.config.version == 2
    assert "architecture: Swin V2, 2 stages" in facts and "(v1)" not in facts, facts


def test_export_npz_from_the_window_equals_the_cli(
    qtbot, swin_shown, swin_ckpt: Path, photo_files, tmp_path: Path
) -> None:
    """File ▸ Export on a Swin (rollout shown): the npz and the map PNG `vitviz-cli explain`
    writes."""
    from vitviz import cli

    window, _ = swin_shown
    select_method(qtbot, window, "rollout")
    qtbot.waitUntil(lambda: settled(window), timeout=WAIT_MS)
    target = tmp_path / "window.npz"
    window.export_to(target, "npz")
    qtbot.waitUntil(target.is_file, timeout=WAIT_MS)
    view = tmp_path / "view.png"
    window.export_to(view, "view")
    qtbot.waitUntil(view.is_file, timeout=WAIT_MS)
    image = photo_files["chelsea"]
    out = tmp_path / "cli"
    cmap = window.viewer.controls.colormap_name()
    assert window.viewer.controls.opacity_value() == 0.6  # the CLI's
    args = ["explain", str(image), "--checkpoint", str(swin_ckpt), "--out", str(out)]
    assert cli.main([*args, "--colormap", cmap]) == 0
    with Image.open(view) as a, Image.open(out / f"{image.stem}_rollout.png") as b:
        got, want = np.asarray(a.convert("RGB"), int), np.asarray(b.convert("RGB"), int)
    assert got.shape == want.shape == (SIZE, SIZE, 3) and np.abs(got - want).max() <= 1
    with np.load(target) as got, np.load(out / f"{image.stem}.npz") as want:
        assert set(got.files) == set(want.files) and "rollout" in got.files
        for k in want.files:
            if want[k].dtype.kind in "US":
                assert got[k].tolist() == want[k].tolist(), k
            else:
                np.testing.assert_allclose(got[k], want[k], atol=1e-6, err_msg=k)


def test_model_info_of_a_model_code_swin(qtbot, tmp_path: Path) -> None:
    """A Swin from model code (per-block config) is summarised and described by its stages."""
    from PySide6.QtWidgets import QPlainTextEdit
    from test_modelcode_swin import _open, _seed_model

    from vitviz.ui.model_info_dialog import ModelInfoDialog
    from vitviz.workers import jobs

    _, model = _seed_model()
    state = jobs.EngineState()
    loaded = _open(tmp_path, model)
    summary = jobs.use_model(state, loaded)
    cfg = summary.config
    assert summary.depth == len(loaded.model.config.heads) == sum(cfg["depths"])
    dialog = ModelInfoDialog(summary)
    qtbot.addWidget(dialog)
    facts = dialog.findChild(QPlainTextEdit).toPlainText()
    for s, depth in enumerate(cfg["depths"]):
        line = (
            f"stage {s}: {depth} blocks, width {cfg['dims'][s]}, {cfg['heads'][s]} heads, "
            f"window {cfg['window_sizes'][s]}"
        )
        assert line in facts.splitlines(), facts


def test_faithfulness_panel_measures_the_swin_method_against_random(
    qtbot, swin_shown, swin_ckpt: Path
) -> None:
    """The Faithfulness panel on a Swin: the shown method's curves (``swin_method_map``'s map of
    the average pool) against random, with the mask beside the sample image."""
    from vitviz.core import resources
    from vitviz.explain.localisation import mask_grid_for
    from vitviz.kinds.swin.faithfulness import evaluate_swin_methods

    window, _ = swin_shown
    v = window.viewer
    image = resources.sample_images()[0]
    drop(window, [image])
    wait_shown(qtbot, window, image.name)
    select_method(qtbot, window, "gradcam")
    qtbot.waitUntil(lambda: settled(window) and v.maps.params.method == "gradcam", timeout=WAIT_MS)
    panel = v.faithfulness
    panel.measure.click()
    qtbot.waitUntil(lambda: panel.result is not None, timeout=WAIT_MS)
    loaded = load_checkpoint(swin_ckpt)
    a = analyze_swin(loaded, image)
    mask = mask_grid_for(image, a.geometry)
    assert mask is not None and mask.shape == tuple(a.stage_grids[0])
    ref = evaluate_swin_methods(a, loaded, ["gradcam", "random"], mask=mask)
    result = panel.result
    assert result.method == "gradcam" and result.has_mask
    assert result.target_class == ref.target_class
    for name in ("gradcam", "random"):
        got, want = result.curves[name], ref.methods[name]
        np.testing.assert_allclose(got.deletion, want.deletion, atol=1e-6)
        np.testing.assert_allclose(got.insertion, want.insertion, atol=1e-6)
        assert got.pointing_hit == want.localisation.pointing_hit
    drawn = panel.deletion.curves["method"].getData()[1]
    np.testing.assert_allclose(drawn, ref.methods["gradcam"].deletion, atol=1e-6)
    assert "random" in panel.deletion.curves
    assert f"{ref.methods['gradcam'].insertion_auc:.3f}" in panel.numbers.text()
    assert panel.measure.isEnabled() and "Swin" not in panel.status.text()
