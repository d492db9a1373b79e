"""Tiny timm TNTs for the TNT kind's tests (random, perturbed weights): 32 px inputs, 8-px
patches (a 4×4 patch grid), pixel stride 4 (2×2 pixel tokens a patch), outer width 32 with 4
heads, inner width 8 with 2 heads, depth 2; current and legacy layouts; and timm's own names at
32 px (their own widths) for the folder form and recognition."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from zoo_helpers import Softmaxes, randomize_, save_timm_folder
from zoo_helpers import save_bare as save_bare

SIZE = 32
TINY = dict(
    img_size=SIZE, patch_size=8, embed_dim=32, inner_dim=8, depth=2, num_heads_outer=4,
    num_heads_inner=2,
)  # fmt: skip
SETTINGS = {"heads": 4, "inner_heads": 2, "patch_size": 8}


def tiny_timm_tnt(
    legacy: bool = False, seed: int = 1, num_classes: int = 5, qkv_bias: bool = False
) -> nn.Module:
    """timm's TNT at the tiny settings."""
    from timm.models.tnt import TNT

    model = TNT(num_classes=num_classes, legacy=legacy, qkv_bias=qkv_bias, **TINY)
    return randomize_(model, seed=seed).eval()


def named_timm_tnt(
    name: str = "tnt_s_patch16_224", seed: int = 2, num_classes: int = 5
) -> nn.Module:
    """timm's ``name`` at 32 px (a 2×2 patch grid of 16-px patches)."""
    import timm

    model = timm.create_model(name, pretrained=False, num_classes=num_classes, img_size=SIZE)
    return randomize_(model, seed=seed).eval()


def timm_logits_and_attention(
    model: nn.Module, x: Tensor
) -> tuple[Tensor, list[Tensor], list[Tensor]]:
    """timm's logits (B, C), every block's outer (B, heads, 1 + N, 1 + N) and inner
    (B·N, inner_heads, n, n) probabilities."""
    with torch.no_grad(), Softmaxes() as mode:
        logits = model(x)
    return logits, mode.out[1::2], mode.out[0::2]


save_folder = save_timm_folder  # timm's own folder (config.json + model.safetensors)
