"""The engine's jobs on a Swin (its kind's ``engine_data``): a Swin becomes the current model, an
image's analysis says each block's layout and head statistics, and a query point's maps are
``query_row`` of the token ``token_at`` picks in every block (resampled to the thumbnail grid for
the head grid)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from swin_helpers import tiny_torchvision_swin

from vitviz.kinds.swin import engine_data
from vitviz.kinds.swin.analysis import analyze_swin
from vitviz.kinds.swin.attention import query_row, token_at
from vitviz.kinds.swin.stats import swin_head_statistics
from vitviz.workers import jobs
from vitviz.workers.messages import ImageResult, MapParams, MapsResult


@pytest.fixture
def swin_ckpt(tmp_path: Path) -> Path:
    path = tmp_path / "swin_tiny.pth"
    torch.save(tiny_torchvision_swin().state_dict(), path)
    return path


@pytest.fixture
def swin_state(swin_ckpt: Path, photo_files) -> tuple[jobs.EngineState, ImageResult]:
    state = jobs.EngineState()
    summary = jobs.load_model(state, swin_ckpt)
    assert summary.depth == 4 and summary.heads == 4
    jobs.set_preprocessing(state, {**state.loaded.preprocessing.to_dict(), "image_size": [64, 64]})
    result = jobs.analyze_image(state, photo_files["chelsea"], "chelsea")
    assert isinstance(result, ImageResult)
    return state, result


def test_image_result_describes_every_block(swin_state) -> None:
    state, result = swin_state
    a = state.analysis
    layers = result.token_geometry.layers
    assert [b.label for b in result.layer_rows] == ["0.0 W", "0.1 SW", "1.0 W", "1.1 SW"]
    assert [b.heads for b in result.layer_rows] == [2, 2, 4, 4]
    assert [b.token_pixels for b in layers] == [4, 4, 8, 8]
    assert [b.grid for b in layers] == [tuple(lay.grid) for lay in a.layouts]
    dist, ent = swin_head_statistics(a.attentions, a.layouts, a.block_stages, 4)
    for b, (d, e) in enumerate(zip(dist, ent, strict=True)):
        h = d.shape[0]
        np.testing.assert_allclose(result.mean_distance[b, :h], d.numpy(), rtol=1e-6)
        np.testing.assert_allclose(result.entropy[b, :h], e.numpy(), rtol=1e-6)
        assert np.isnan(result.mean_distance[b, h:]).all()
    assert "relevance" in result.unavailable and "CLS token" in result.unavailable["relevance"]
    assert "rollout" not in result.unavailable and "gradcam" not in result.unavailable


@pytest.mark.parametrize(("size", "thumb", "thumb_px"), [(64, (16, 16), 4), (160, (20, 20), 8)])
def test_query_maps_are_query_rows_of_token_at(
    swin_state, size: int, thumb: tuple[int, int], thumb_px: int
) -> None:
    """At 160 px the first stage's 40 × 40 grid is finer than a thumbnail shows: the thumbnails
    are drawn at stage 2's 20 × 20 cells of 8 px, each the token covering the cell's centre."""
    state, result = swin_state
    if size != 64:
        prep = {**state.loaded.preprocessing.to_dict(), "image_size": [size, size]}
        jobs.set_preprocessing(state, prep)
        result = jobs.analyze_image(state, result.source_path, "chelsea")
    assert (result.thumb_grid, result.thumb_pixels) == (thumb, thumb_px)
    a = state.analysis
    cell = (5, 9)
    maps = jobs.compute_maps(state, MapParams(query=cell))
    assert isinstance(maps, MapsResult)
    point = ((cell[0] + 0.5) * 4, (cell[1] + 0.5) * 4)
    for b, (attn, layout) in enumerate(zip(a.attentions, a.layouts, strict=True)):
        px = 4 * 2 ** a.block_stages[b]
        token = token_at(layout, px, point)
        assert maps.query_tokens[b] == token
        row = query_row(attn, layout, token).numpy().reshape(-1, *layout.grid)
        np.testing.assert_allclose(maps.layer_maps[b], row, atol=1e-7)
        centres = np.arange(thumb[0]) * thumb_px + thumb_px // 2
        ys = np.minimum(centres // px, layout.grid[0] - 1)
        xs = np.minimum(centres // px, layout.grid[1] - 1)
        nearest = row[:, ys[:, None], xs[None, :]]  # the token covering each cell's centre
        assert maps.head_maps.shape[-2:] == thumb
        np.testing.assert_array_equal(maps.head_maps[b, : row.shape[0]], nearest)
        assert np.isnan(maps.head_maps[b, row.shape[0] :]).all()
        np.testing.assert_allclose(maps.mean_maps[b], maps.head_maps[b, : row.shape[0]].mean(0))


def test_thumbnail_grid_is_the_first_stage_grid_a_thumbnail_can_show() -> None:
    swin_t = ((56, 56), (28, 28), (14, 14), (7, 7))  # Swin-T at 224, patch 4
    assert engine_data.thumbnail_grid(swin_t, 4) == ((28, 28), 8)
    assert engine_data.thumbnail_grid(((32, 24), (16, 12)), 2) == ((32, 24), 2)
    assert engine_data.thumbnail_grid(((200, 200), (100, 100)), 4) == ((200, 200), 4)  # none ≤ 32
    assert engine_data.thumbnail_grid(((64, 64), (32, 32), (16, 16)), 4) == ((32, 32), 8)
    # 140 px wide: 35 columns, merged to 18 (padded): stage 2 would not cover the input exactly
    assert engine_data.thumbnail_grid(((48, 35), (24, 18), (12, 9)), 4) == ((48, 35), 4)


def test_rollout_and_gradcam_maps(swin_state) -> None:
    state, _ = swin_state
    a = state.analysis
    pooled = jobs.compute_maps(state, MapParams(method="rollout"))
    np.testing.assert_allclose(pooled.method_map, a.rollout().numpy(), atol=1e-6)
    cell = (3, 2)
    clicked = jobs.compute_maps(state, MapParams(query=cell, method="rollout"))
    last = a.layouts[-1]
    token = token_at(last, 8, ((cell[0] + 0.5) * 4, (cell[1] + 0.5) * 4))
    expected = a.rollout(query=token, query_stage=len(a.stage_grids) - 1).numpy()
    np.testing.assert_allclose(clicked.method_map, expected, atol=1e-6)
    grad = jobs.compute_maps(state, MapParams(method="gradient-rollout"))
    again = analyze_swin(state.loaded, a.input, gradients=True)
    np.testing.assert_allclose(grad.method_map, again.gradient_rollout().numpy(), atol=1e-5)
    cam = jobs.compute_maps(state, MapParams(method="gradcam"))
    assert cam.error is None and cam.method_map.shape == tuple(a.stage_grids[-1])


def test_faithfulness_of_a_swin_is_evaluate_swin_methods(swin_ckpt: Path) -> None:
    """The shown method against random, with the mask beside the image, also after the
    gradient rollout was shown (its analysis, run again with gradients, keeps the geometry)."""
    from vitviz.core.resources import sample_images
    from vitviz.explain.localisation import mask_grid_for
    from vitviz.kinds.swin.faithfulness import evaluate_swin_methods

    image = sample_images()[0]
    state = jobs.EngineState()
    jobs.load_model(state, swin_ckpt)
    jobs.set_preprocessing(state, {**state.loaded.preprocessing.to_dict(), "image_size": [48, 48]})
    jobs.analyze_image(state, image, image.name)
    shown = jobs.compute_maps(state, MapParams(method="gradient-rollout", target_class=1))
    assert shown.error is None and state.analysis.target_class == 1  # the state's was replaced
    got = jobs.faithfulness(state, "gradient-rollout", steps=4)
    ref_analysis = analyze_swin(state.loaded, image)
    mask = mask_grid_for(image, ref_analysis.geometry)
    assert mask is not None and mask.any()
    ref = evaluate_swin_methods(
        ref_analysis, state.loaded, ["gradient-rollout", "random"], steps=4, mask=mask
    )
    assert got.has_mask and got.target_class == ref.target_class and got.steps == 4
    assert set(got.curves) == {"gradient-rollout", "random"}
    for name, want in ref.methods.items():
        c = got.curves[name]
        np.testing.assert_allclose(c.deletion, want.deletion, atol=1e-6)
        np.testing.assert_allclose(c.insertion, want.insertion, atol=1e-6)
        assert c.mass_in_mask == pytest.approx(want.localisation.mass_in_mask, abs=1e-6)
        assert c.pointing_hit == want.localisation.pointing_hit
    with pytest.raises(jobs.UserFacingError, match="CLS token"):
        jobs.faithfulness(state, "relevance")
