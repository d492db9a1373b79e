"""The learning-quality measure: accuracy and rollout mass inside the object masks."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from vitviz.blocks import VisionTransformer, ViTConfig
from vitviz.checkpoints import CheckpointError, LoadedModel, save_checkpoint
from vitviz.checkpoints.native import default_preprocessing
from vitviz.training.evaluate import (
    evaluate_shapes_checkpoint,
    evaluate_shapes_model,
    main,
    patch_coverage,
    rollout_mass,
)
from vitviz.training.shapes import SHAPE_NAMES


def test_patch_coverage_is_the_object_share_of_each_patch() -> None:
    masks = torch.zeros(1, 8, 8, dtype=torch.bool)
    masks[0, :4, :2] = True  # half of the top-left 4 × 4 patch
    cover = patch_coverage(masks, (2, 2))
    torch.testing.assert_close(cover, torch.tensor([[[0.5, 0.0], [0.0, 0.0]]]))


def _cls_attention(weights: torch.Tensor) -> list[torch.Tensor]:
    """One layer, one head, 1 + 4 tokens: CLS attends to the patches with ``weights``;
    patches attend to themselves."""
    a = torch.eye(5)
    a[0] = torch.cat([torch.zeros(1), weights])
    return [a.view(1, 1, 5, 5)]


def test_rollout_mass_uniform_attention_scores_the_mask_share() -> None:
    coverage = torch.tensor([[[1.0, 0.5], [0.0, 0.0]]])
    uniform = rollout_mass(_cls_attention(torch.full((4,), 0.25)), (2, 2), 1, coverage)
    torch.testing.assert_close(uniform, coverage.flatten(1).mean(dim=1))
    focused = rollout_mass(_cls_attention(torch.tensor([1.0, 0, 0, 0])), (2, 2), 1, coverage)
    torch.testing.assert_close(focused, torch.tensor([1.0]))


def _random_shapes_model(path: Path | None = None) -> LoadedModel:
    torch.manual_seed(0)
    cfg = ViTConfig(image_size=32, patch_size=8, num_classes=10, dim=32, depth=2, heads=2)
    model = VisionTransformer(cfg).eval()
    if path is not None:
        save_checkpoint(
            model,
            path,
            class_names=list(SHAPE_NAMES),
            provenance={"dataset": {"train_seed": 5, "val_seed": 6}, "epochs": 2},
        )
    return LoadedModel(model, list(SHAPE_NAMES), default_preprocessing(cfg), "vitviz")


def test_evaluate_an_untrained_model_is_near_chance(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = evaluate_shapes_model(_random_shapes_model(), n=100, seed=1)
    assert result.n == 100 and 0.0 <= result.accuracy <= 0.3
    assert 0.05 < result.mask_share < 0.3
    assert 0.5 < result.ratio < 1.6  # an untrained model looks about everywhere
    assert set(result.per_class_accuracy) == set(SHAPE_NAMES)

    _random_shapes_model(tmp_path / "m.safetensors")
    with pytest.raises(ValueError, match="seed 5 was used in training"):
        evaluate_shapes_checkpoint(tmp_path / "m.safetensors", n=10, seed=5)
    assert main([str(tmp_path / "m.safetensors"), "--n", "20", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "accuracy:" in out and "rollout mass in masks:" in out and "ratio:" in out


def test_a_model_of_other_classes_is_refused(tmp_path: Path) -> None:
    loaded = _random_shapes_model()
    loaded.class_names = [f"class {i}" for i in range(10)]
    with pytest.raises(CheckpointError, match="not trained on the synthetic shapes"):
        evaluate_shapes_model(loaded, n=10)
