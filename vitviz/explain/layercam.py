"""LayerCAM (Jiang et al. 2021; DESIGN §5): each position's features weighted by the positive
part of their own gradient."""

from __future__ import annotations

from torch import Tensor

from vitviz.explain.cam_layer import gradient_method


def layer_cam(activations: Tensor, gradients: Tensor) -> Tensor:
    """ReLU(Σ_k ReLU(G_k) ⊙ A_k): A, G (B, C, h, w) -> (B, h, w), unscaled."""
    return (gradients.clamp_min(0) * activations).sum(dim=1).clamp_min(0)


layercam_method = gradient_method("layercam", layer_cam)
