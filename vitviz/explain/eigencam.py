"""Eigen-CAM (Muhammad & Yeasin 2020; DESIGN §5): the features projected on their first
principal component, no gradient and no class.

Per image, X (h·w, C) the features with each channel's mean over the grid taken off; V₁ the
first right singular vector of X; map = ReLU(X·V₁) on the grid. A singular vector's sign is
arbitrary: vitviz turns it so that the projection's entry of largest magnitude is positive
(the strongest response shows, whichever way the SVD returned it; Seg-Eigen-CAM's sign
correction, Chung & Ying 2025, eq. 13).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from vitviz.explain.cam_layer import analysis_input, cached, layer_pass
from vitviz.explain.tokens import min_max_scale
from vitviz.kindapi.feature_sites import DEFAULT_LAYER


def first_component(features: Tensor) -> Tensor:
    """(B, C, h, w) -> (B, h, w): the centred features' projection on their first principal
    component, turned so its largest |value| is positive (no ReLU)."""
    B, _, h, w = features.shape
    x = features.flatten(2).transpose(1, 2)  # (B, h·w, C)
    x = x - x.mean(dim=1, keepdim=True)
    _, _, vh = torch.linalg.svd(x, full_matrices=False)
    proj = x @ vh[:, 0, :, None]  # (B, h·w, 1)
    proj = proj[..., 0]
    peak = proj.gather(1, proj.abs().argmax(dim=1, keepdim=True))  # (B, 1)
    sign = torch.where(peak < 0, -1.0, 1.0).to(proj)
    return (proj * sign).reshape(B, h, w)


def eigen_cam(activations: Tensor) -> Tensor:
    """ReLU of the first principal component's projection: (B, C, h, w) -> (B, h, w)."""
    return first_component(activations).clamp_min(0)


def eigencam_method(
    analysis: Any, query: object, target_class: int | None, params: Mapping[str, Any]
) -> Tensor:
    """The table's Eigen-CAM on layer ``params['layer']``: (h, w), min-max scaled (the class is
    not used)."""
    kind, model, x, _ = analysis_input(analysis)
    layer = str(params.get("layer", DEFAULT_LAYER))

    def build() -> Tensor:
        lp = layer_pass(kind, model, x, layer, gradients=False)
        return min_max_scale(eigen_cam(lp.activations.double()))[0].float().cpu()

    return cached(analysis, ("eigencam", layer), build)
