"""Element-wise Grad-CAM (pytorch-grad-cam's GradCAMElementWise; DESIGN §5): the ReLU taken
of each element of G ⊙ A before the channels are summed."""

from __future__ import annotations

from torch import Tensor

from vitviz.explain.cam_layer import gradient_method


def gradcam_elementwise(activations: Tensor, gradients: Tensor) -> Tensor:
    """Σ_k ReLU(G_k ⊙ A_k): A, G (B, C, h, w) -> (B, h, w), unscaled (never negative)."""
    return (gradients * activations).clamp_min(0).sum(dim=1)


gradcam_elementwise_method = gradient_method("gradcam-elementwise", gradcam_elementwise)
