"""Token Grad-CAM on a pyramid ViT: the last block's first LayerNorm output on the last stage's
grid (a Hiera's second LayerNorm: its last block may pool, its first norm then being on the
stage before). features F (B, N_S, D); weights w_d = mean over tokens of ∂y_c/∂F[·, d];
map = ReLU(Σ_d w_d F[·, d]), min-max scaled, (B, H_S, W_S): the ViT's definition on the grid
the head pools (a PVT v1's CLS token left out, as a ViT's)."""

from __future__ import annotations

import torch
from torch import Tensor

from vitviz.explain.targets import target_classes
from vitviz.explain.tokens import min_max_scale
from vitviz.kinds.pyramid.hiera_network import HieraViT
from vitviz.kinds.pyramid.network import PyramidViT


def pyramid_token_gradcam(
    model: PyramidViT | HieraViT, x: Tensor, target: int | Tensor | None = None
) -> Tensor:
    """(B, C, H, W) images -> (B, H_S, W_S) Grad-CAM maps for ``target`` (None: the top class)."""
    captured: list[Tensor] = []
    # a Hiera's last block may pool: its second LayerNorm is on the last stage's grid
    norm = model.blocks[-1].norm2 if isinstance(model, HieraViT) else model.blocks[-1].norm1
    handle = norm.register_forward_hook(lambda _m, _i, output: captured.append(output))
    try:
        with torch.enable_grad():
            x = x.detach().requires_grad_(True)
            out = model.forward_explained(x, capture_attention=False)
            c = target_classes(out.logits, target)
            y = out.logits.gather(1, c[:, None]).sum()
            features = captured[-1]  # (B, P + N_S, D)
            (grads,) = torch.autograd.grad(y, features)
    finally:
        handle.remove()
    P = int(getattr(model.config, "cls_last", False))  # a PVT v1's CLS: not on the grid
    features, grads = features[:, P:], grads[:, P:]
    weights = grads.mean(dim=1, keepdim=True)  # (B, 1, D)
    cam = (features.detach() * weights).sum(dim=-1).clamp_min(0)  # (B, N_S)
    return min_max_scale(cam.reshape(x.shape[0], *out.stage_grids[-1]))
