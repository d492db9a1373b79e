"""The Features tab and the logit-lens chart, driven as a user would: the PCA, similarity and
token-norm views show what the feature maps compute on the same image and checkpoint; a click
makes a patch the query, the block spin box picks the block; high-norm tokens are outlined;
the logit-lens chart below them draws the top classes by depth; the pca method shows colours
in the Viewer's large map."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_ui_window import WAIT_MS, click, drop, new_window, select_method, settled, wait_shown

from vitviz.checkpoints import load_checkpoint
from vitviz.explain.feature_methods import analysis_logit_lens, high_norm_tokens
from vitviz.explain.methods import get_method
from vitviz.pipeline.analysis import analyze


@pytest.fixture
def shown(qtbot, tmp_path: Path, tiny_ckpt: Path, photo_files):
    window = new_window(qtbot, tmp_path / "settings" / "vitviz.ini")
    image = photo_files["chelsea"]
    drop(window, [image, tiny_ckpt])
    wait_shown(qtbot, window, image.name)
    window.tabs.setCurrentWidget(window.features)  # its features are asked for as it shows
    qtbot.waitUntil(lambda: window.features.result is not None and not window.client.is_busy(),
                    timeout=WAIT_MS)  # fmt: skip
    return window, analyze(load_checkpoint(tiny_ckpt), image)


def test_features_run_only_while_the_tab_shows(qtbot, tmp_path: Path, tiny_ckpt: Path,
                                               photo_files) -> None:  # fmt: skip
    window = new_window(qtbot, tmp_path / "settings" / "vitviz.ini")
    asked: list[str] = []
    submit = window.client.submit
    window.client.submit = lambda channel, job: asked.append(channel) or submit(channel, job)
    drop(window, [photo_files["chelsea"], tiny_ckpt])
    wait_shown(qtbot, window, photo_files["chelsea"].name)
    assert "features" not in asked and window.features.result is None  # the Viewer shows
    window.tabs.setCurrentWidget(window.features)
    qtbot.waitUntil(lambda: _features_settled(window), timeout=WAIT_MS)
    assert asked.count("features") == 1
    window.tabs.setCurrentWidget(window.viewer)
    drop(window, [photo_files["rocket"]])
    wait_shown(qtbot, window, photo_files["rocket"].name)
    assert asked.count("features") == 1  # hidden: the new image asks nothing yet
    window.tabs.setCurrentWidget(window.features)
    qtbot.waitUntil(lambda: _features_settled(window) and asked.count("features") == 2,
                    timeout=WAIT_MS)  # fmt: skip


def _features_settled(window) -> bool:
    f = window.features
    return not window.client.is_busy() and f.result is not None and f.result.query == f.query


def test_the_views_show_the_feature_maps(qtbot, shown) -> None:
    window, ref = shown
    f = window.features
    window.tabs.setCurrentWidget(f)
    np.testing.assert_allclose(f.pca_view.rgb_overlay.image, get_method("pca")(ref).numpy(),
                               atol=1e-6)  # fmt: skip
    assert f.pca_view.rgb_overlay.isVisible() and not f.pca_view.overlay.isVisible()
    sim = get_method("similarity")(ref, None, None, {"layer": -1}).numpy()
    np.testing.assert_allclose(np.asarray(f.similarity_view.overlay.image), sim, atol=1e-6)
    norms = high_norm_tokens(ref)
    np.testing.assert_allclose(np.asarray(f.norm_view.overlay.image), norms["norms"], rtol=1e-6)
    assert len(f._outlines) == int(norms["high"].sum())
    assert "(CLS)" in f.prefix_label.text()
    assert f.query_label.text() == "query: the CLS token"  # the token it took, said


def test_the_query_words_name_the_mean_token_of_a_model_without_a_cls(
    qtbot, tmp_path: Path, photo_files
) -> None:
    """A model without prefix tokens: the similarity's query is the mean patch token, and the
    query line says that one (not "CLS (or the mean token)")."""
    from conftest import random_vit

    from vitviz.checkpoints import save_checkpoint

    model = random_vit(seed=4, class_token=False, global_pool="avg")
    ckpt = save_checkpoint(model, tmp_path / "nocls.safetensors", class_names=list("abcde"))
    window = new_window(qtbot, tmp_path / "settings" / "vitviz.ini")
    drop(window, [photo_files["chelsea"], ckpt])
    wait_shown(qtbot, window, photo_files["chelsea"].name)
    window.tabs.setCurrentWidget(window.features)
    qtbot.waitUntil(lambda: _features_settled(window), timeout=WAIT_MS)
    f = window.features
    assert f.result.prefix_norms.size == 0
    assert f.query_label.text() == "query: the mean patch token"
    f.set_query((1, 2))
    assert f.query_label.text() == "query: patch row 1, col 2"


def test_click_and_block_follow(qtbot, shown) -> None:
    window, ref = shown
    f = window.features
    window.tabs.setCurrentWidget(f)
    view = f.similarity_view
    qtbot.waitUntil(lambda: view.isVisible(), timeout=WAIT_MS)
    before, curves = f.result, f.logit_lens.getPlotItem().listDataItems()
    asked: list[str] = []
    submit = window.client.submit
    window.client.submit = lambda channel, job: asked.append(channel) or submit(channel, job)
    click(view, view.vb.mapViewToScene(view.patch_rect(2, 1).center()))
    assert f.query == (2, 1)
    qtbot.waitUntil(lambda: _features_settled(window), timeout=WAIT_MS)
    assert asked == []  # the window looked the clicked patch up in the shown block's table
    want = get_method("similarity")(ref, (2, 1), None, {"layer": -1}).numpy()
    np.testing.assert_allclose(np.asarray(view.overlay.image), want, atol=1e-6)
    # a click computes and draws the similarity only: the rest is the same arrays, not redrawn
    assert f.result is not before and f.result.similarity is not before.similarity
    assert f.result.pca is before.pca and f.result.norms is before.norms
    assert f.result.logit_lens is before.logit_lens
    assert f.logit_lens.getPlotItem().listDataItems() == curves
    f.block.setValue(0)
    qtbot.waitUntil(lambda: _features_settled(window) and f.result.layer == 0, timeout=WAIT_MS)
    assert asked == ["features"]  # another block: the engine's
    want = get_method("similarity")(ref, (2, 1), None, {"layer": 0}).numpy()
    np.testing.assert_allclose(np.asarray(view.overlay.image), want, atol=1e-6)
    click(view, view.vb.mapViewToScene(view.patch_rect(0, 3).center()))
    assert asked == ["features"] and f.result.query == (0, 3)  # looked up at once
    want = get_method("similarity")(ref, (0, 3), None, {"layer": 0}).numpy()
    np.testing.assert_allclose(np.asarray(view.overlay.image), want, atol=1e-6)
    want = get_method("token-norm")(ref, None, None, {"layer": 0}).numpy()
    np.testing.assert_allclose(np.asarray(f.norm_view.overlay.image), want, rtol=1e-6)
    assert f.result.norms is not before.norms and f.result.pca is before.pca
    f.foreground.setValue(0.3)  # asked of the engine (with the query (0, 3)) …
    click(view, view.vb.mapViewToScene(view.patch_rect(1, 1).center()))  # … clicked meanwhile
    qtbot.waitUntil(lambda: not window.client.is_busy(), timeout=WAIT_MS)
    assert asked == ["features", "features"] and f.result.query == (1, 1)
    want = get_method("similarity")(ref, (1, 1), None, {"layer": 0}).numpy()
    np.testing.assert_allclose(np.asarray(view.overlay.image), want, atol=1e-6)
    f.query_reset.click()
    qtbot.waitUntil(lambda: _features_settled(window) and f.result.query is None, timeout=WAIT_MS)


def test_logit_lens_chart_draws_the_top_classes_by_depth(qtbot, shown) -> None:
    window, ref = shown
    chart = window.features.logit_lens
    lens = analysis_logit_lens(ref).numpy()
    top = [int(c) for c in np.argsort(-lens[-1], kind="stable")[:3]]
    assert chart.shown == top
    ticks = chart.getAxis("bottom")._tickLevels[0]  # whole blocks, none between
    assert [v for v, _ in ticks] == list(range(lens.shape[0]))
    curves = chart.getPlotItem().listDataItems()
    assert len(curves) == 3
    for curve, c in zip(curves, top, strict=True):
        _, y = curve.getData()
        np.testing.assert_allclose(y, lens[:, c], rtol=1e-5)


def test_pca_in_the_viewer_shows_colours(qtbot, shown) -> None:
    window, ref = shown
    select_method(qtbot, window, "pca")
    qtbot.waitUntil(lambda: settled(window), timeout=WAIT_MS)
    view = window.viewer.map_view
    assert view.rgb_overlay.isVisible() and not view.overlay.isVisible()
    np.testing.assert_allclose(view.rgb_overlay.image, get_method("pca")(ref).numpy(), atol=1e-6)
    assert np.isnan(view.value_at(0, 0))
    select_method(qtbot, window, "rollout")
    qtbot.waitUntil(lambda: settled(window), timeout=WAIT_MS)
    assert view.overlay.isVisible() and not view.rgb_overlay.isVisible()
