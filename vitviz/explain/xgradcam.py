"""XGrad-CAM (Fu et al. 2020; DESIGN §5): each channel weighted by its gradient averaged with
the channel's own activations as weights."""

from __future__ import annotations

from torch import Tensor

from vitviz.explain.cam_layer import cam_from_weights, gradient_method

EPS = 1e-7  # added to Σ A_k so a channel summing to 0 has a finite weight (pytorch-grad-cam's)


def xgrad_cam(activations: Tensor, gradients: Tensor) -> Tensor:
    """w_k = Σ_ij G_k,ij A_k,ij / (Σ_ij A_k,ij + ε); ReLU(Σ_k w_k A_k): (B, C, h, w) ->
    (B, h, w), unscaled."""
    total = activations.sum(dim=(2, 3))  # (B, C)
    weights = (gradients * activations).sum(dim=(2, 3)) / (total + EPS)
    return cam_from_weights(activations, weights)


xgradcam_method = gradient_method("xgradcam", xgrad_cam)
