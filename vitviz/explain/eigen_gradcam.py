"""Eigen-Grad-CAM (pytorch-grad-cam's EigenGradCAM; DESIGN §5): Eigen-CAM of the gradient
multiplied into the features, G ⊙ A, so the component is the class's (the sign turned as
Eigen-CAM's: the largest |value| positive)."""

from __future__ import annotations

from torch import Tensor

from vitviz.explain.cam_layer import gradient_method
from vitviz.explain.eigencam import first_component


def eigen_grad_cam(activations: Tensor, gradients: Tensor) -> Tensor:
    """ReLU(first principal component's projection of G ⊙ A): (B, C, h, w) -> (B, h, w)."""
    return first_component(gradients * activations).clamp_min(0)


eigen_gradcam_method = gradient_method("eigen-gradcam", eigen_grad_cam)
