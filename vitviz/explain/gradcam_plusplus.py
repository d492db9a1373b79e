"""Grad-CAM++ (Chattopadhay et al. 2018; DESIGN §5): the closed form of its α for an exponential
of the score, so that only first-order gradients are needed (the paper's eq. 19)."""

from __future__ import annotations

import torch
from torch import Tensor

from vitviz.explain.cam_layer import cam_from_weights, gradient_method

EPS = 1e-6  # added to α's denominator (pytorch-grad-cam's); α = 0 where G = 0


def gradcam_plus_plus(activations: Tensor, gradients: Tensor) -> Tensor:
    """α_k,ij = G² / (2G² + (Σ_ab A_k,ab)·G³ + ε) (0 where G = 0); w_k = Σ_ij α_k,ij ReLU(G_k,ij);
    ReLU(Σ_k w_k A_k): (B, C, h, w) -> (B, h, w), unscaled."""
    g2 = gradients.pow(2)
    total = activations.sum(dim=(2, 3), keepdim=True)  # (B, C, 1, 1)
    alpha = g2 / (2 * g2 + total * gradients.pow(3) + EPS)
    alpha = torch.where(gradients != 0, alpha, torch.zeros_like(alpha))
    weights = (alpha * gradients.clamp_min(0)).sum(dim=(2, 3))  # (B, C)
    return cam_from_weights(activations, weights)


gradcam_plusplus_method = gradient_method("gradcam-plusplus", gradcam_plus_plus)
