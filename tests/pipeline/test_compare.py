"""Two models compared (DESIGN §5, "Compare"): head similarity against a float64 cosine of the
CLS attention rows written here; a model with itself is 1 everywhere; models of other depths
and head counts compare per layer by relative depth; the folder mean is the mean."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import CLASS_NAMES, random_vit

from vitviz.checkpoints import LoadedModel
from vitviz.explain.features import head_similarity
from vitviz.imaging import Preprocessing
from vitviz.pipeline.analysis import analyze
from vitviz.pipeline.compare import compare_analyses, mean_comparison, query_attention

IMAGE = np.random.default_rng(5).integers(0, 255, (32, 32, 3), dtype=np.uint8)


def _loaded(seed: int, **overrides) -> LoadedModel:
    model = random_vit(seed=seed, **overrides)
    return LoadedModel(model, CLASS_NAMES, Preprocessing(image_size=(32, 32)), "vitviz")


@pytest.fixture(scope="module")
def pair():
    a, b = _loaded(0), _loaded(1)
    return a, analyze(a, IMAGE), b, analyze(b, IMAGE)


def _cls_rows(analysis) -> np.ndarray:
    """(L, H, N_patches) float64: each layer's and head's CLS row over the patches."""
    return analysis.attention[:, :, 0, analysis.num_prefix_tokens :].double().numpy()


def test_head_similarity_is_the_cosine_of_cls_rows(pair) -> None:
    la, a, lb, b = pair
    both = compare_analyses(la, a, lb, b)
    np.testing.assert_array_equal(both.rollout_a, a.rollout().numpy())
    np.testing.assert_array_equal(both.rollout_b, b.rollout().numpy())
    np.testing.assert_array_equal(both.logits_b, b.logits.numpy())
    got = both.head_similarity
    ra, rb = _cls_rows(a), _cls_rows(b)
    want = (ra * rb).sum(-1) / (np.linalg.norm(ra, axis=-1) * np.linalg.norm(rb, axis=-1))
    assert got.shape == want.shape == (2, 2)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert not np.allclose(got, 1.0)


def test_a_model_with_itself_is_one(pair) -> None:
    la, a, _, _ = pair
    again = analyze(la, IMAGE)
    got = compare_analyses(la, a, la, again)
    np.testing.assert_allclose(got.head_similarity, 1.0, atol=1e-6)
    np.testing.assert_array_equal(got.logits_a, got.logits_b)
    np.testing.assert_array_equal(got.rollout_a, got.rollout_b)


def test_other_shapes_compare_per_layer_by_relative_depth(pair) -> None:
    la, a, _, _ = pair
    lb = _loaded(3, depth=3, heads=4)
    b = analyze(lb, IMAGE)
    got = compare_analyses(la, a, lb, b).head_similarity
    ma = _cls_rows(a).mean(axis=1)  # (2, N): heads averaged
    mb = _cls_rows(b).mean(axis=1)  # (3, N)
    rows = [0, 2]  # A's layers 0, 1 at relative depth 0, 1 of B's 0..2
    want = [
        float(ma[i] @ mb[j] / (np.linalg.norm(ma[i]) * np.linalg.norm(mb[j])))
        for i, j in enumerate(rows)
    ]
    assert got.shape == (2, 1)
    np.testing.assert_allclose(got[:, 0], want, rtol=1e-5)


def test_grids_that_differ_are_resampled_to_as() -> None:
    a = torch.rand(2, 2, 4, 4)
    b = torch.rand(2, 2, 2, 2)
    got = head_similarity(a, b)
    up = torch.nn.functional.interpolate(b.double().mean(1)[None], size=(4, 4), mode="bilinear",
                                         align_corners=False)[0]  # fmt: skip
    ma = a.double().mean(1)
    want = (ma * up).flatten(1).sum(-1) / (ma.flatten(1).norm(dim=-1) * up.flatten(1).norm(dim=-1))
    torch.testing.assert_close(got[:, 0].double(), want, rtol=1e-6, atol=1e-7)


def test_query_attention_is_the_cls_row_on_the_grid(pair) -> None:
    la, a, _, _ = pair
    got = query_attention(la, a)
    np.testing.assert_allclose(got.reshape(2, 2, -1).numpy(), _cls_rows(a), rtol=1e-6)


def test_the_mean_of_comparisons_is_their_mean(pair) -> None:
    la, a, lb, b = pair
    one = compare_analyses(la, a, lb, b)
    other_image = np.full((32, 32, 3), 200, dtype=np.uint8)
    two = compare_analyses(la, analyze(la, other_image), lb, analyze(lb, other_image))
    mean = mean_comparison([one, two])
    halfway = (one.head_similarity + two.head_similarity) / 2
    np.testing.assert_allclose(mean.head_similarity, halfway, rtol=1e-6)
    np.testing.assert_allclose(mean.rollout_b, (one.rollout_b + two.rollout_b) / 2, rtol=1e-6)
