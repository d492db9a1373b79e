"""HiResCAM (Draelos & Carin 2020) on a layer's features (DESIGN §5): the gradient multiplied
into the features element by element, summed over the channels; ReLU."""

from __future__ import annotations

from torch import Tensor

from vitviz.explain.cam_layer import gradient_method


def hires_cam(activations: Tensor, gradients: Tensor) -> Tensor:
    """ReLU(Σ_k G_k ⊙ A_k): A, G (B, C, h, w) -> (B, h, w), unscaled."""
    return (gradients * activations).sum(dim=1).clamp_min(0)


hirescam_method = gradient_method("hirescam", hires_cam)
