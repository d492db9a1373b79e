"""Grad-CAM baselines: on the last layer's attention (Chefer et al. 2021) and on tokens (as
pytorch-grad-cam does it, with the grid taken from the model): ``token_gradcam`` a pre-norm
ViT's last block's norm1, ``gradcam_method`` the table's on any layer of any kind (its ``auto``
that norm1, or a post-norm last block's output; DESIGN §5)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from vitviz.explain.cam_layer import gradient_method
from vitviz.explain.maps import attention_maps
from vitviz.explain.targets import target_classes
from vitviz.explain.tokens import min_max_scale, patch_part
from vitviz.kindapi import kind_of


def attention_gradcam(
    attention: Tensor,
    gradient: Tensor,
    grid: tuple[int, int],
    num_prefix: int,
    query: int | None = 0,
) -> Tensor:
    """ReLU(mean_h A[h, q, patches] · mean_p G[h, q, patches]), min-max scaled.

    attention, gradient: the last layer's (B, H, N, N) -> (B, gh, gw). ``query`` None
    averages the rows of all patch queries.
    """
    if attention.shape != gradient.shape:
        raise ValueError(f"attention {tuple(attention.shape)} vs gradient {tuple(gradient.shape)}")
    a = attention_maps(attention, grid, num_prefix, query)  # (B, H, gh, gw)
    g = attention_maps(gradient, grid, num_prefix, query)
    weights = g.mean(dim=(2, 3), keepdim=True)  # (B, H, 1, 1)
    return min_max_scale((a * weights).mean(dim=1).clamp_min(0))


def token_gradcam(model: nn.Module, x: Tensor, target: int | Tensor | None = None) -> Tensor:
    """Grad-CAM on the tokens of the last block's first LayerNorm: (B, C, H, W) -> (B, gh, gw).

    features F = norm1 output over the patch tokens on the model's (gh, gw) grid; weights
    w_d = mean over patches of ∂y_c/∂F[p, d]; map = ReLU(Σ_d w_d F[p, d]), min-max scaled.
    ``target``: a class, (B,) classes, or None for each image's top class. F is the normalised
    tokens the last block's attention reads: a model whose last block is post-norm (its norm1
    follows the attention, ``ModelKind.norm1_is_pre_norm``) is refused (DESIGN §5).
    """
    blocks = getattr(model, "blocks", None)
    if not blocks or not hasattr(blocks[-1], "norm1"):
        raise ValueError("token Grad-CAM needs a ViT whose blocks have a first LayerNorm")
    if not kind_of(model).norm1_is_pre_norm(model, -1):
        raise ValueError(
            "token Grad-CAM reads the last block's norm1 as the tokens its attention reads, and "
            "this model's last block is post-norm (its norm1 follows the attention); the CAM "
            "family's auto layer reads that block's output"
        )
    captured: list[Tensor] = []

    def keep(_module: nn.Module, _inputs: tuple, output: Tensor) -> None:
        captured.append(output)

    handle = blocks[-1].norm1.register_forward_hook(keep)
    try:
        with torch.enable_grad():
            x = x.detach().requires_grad_(True)
            out = model.forward_explained(x, capture_attention=False)
            logits = out.logits
            c = target_classes(logits, target)
            y = logits.gather(1, c[:, None]).sum()
            features = captured[-1]  # (B, N, D)
            (grads,) = torch.autograd.grad(y, features)
    finally:
        handle.remove()
    P = out.num_prefix_tokens
    f = features.detach()[:, P:]  # (B, gh·gw, D)
    weights = grads[:, P:].mean(dim=1, keepdim=True)  # (B, 1, D)
    cam = (f * weights).sum(dim=-1).clamp_min(0)  # (B, gh·gw)
    return min_max_scale(patch_part(cam, out.grid, 0))


def grad_cam(activations: Tensor, gradients: Tensor) -> Tensor:
    """Grad-CAM (Selvaraju et al. 2017) on a layer's features A (B, C, h, w) and G = ∂y_c/∂A:
    w_k = mean over the grid of G_k; ReLU(Σ_k w_k A_k) -> (B, h, w), unscaled."""
    weights = gradients.mean(dim=(2, 3))  # (B, C)
    return (activations * weights[:, :, None, None]).sum(dim=1).clamp_min(0)


gradcam_method = gradient_method("gradcam", grad_cam)  # the table's, on every kind (DESIGN §5)
