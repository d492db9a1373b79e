"""Tiny timm MViTv2s for the MViTv2 kind's tests (random, perturbed weights): 64 px inputs,
stem stride 4, stage grids 16×16, 8×8, 4×4, 2×2, widths 8-16-32-64, heads 1-2-4-8, depths
1-2-1-1; and timm's own mvitv2_tiny at 32 px for the folder form (timm builds its names only
at their own widths)."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from zoo_helpers import Softmaxes, randomize_, save_timm_folder
from zoo_helpers import save_bare as save_bare

SIZE = 64
DEPTHS = (1, 2, 1, 1)
NAMED_SIZE = 32


def tiny_timm_mvit(
    cls: bool = False, expand_attn: bool = True, seed: int = 1, num_classes: int = 5
) -> nn.Module:
    """timm's MultiScaleVit with the timm names' settings but widths 8-64 and depths 1-2-1-1."""
    from timm.models.mvitv2 import MultiScaleVit, MultiScaleVitCfg

    cfg = MultiScaleVitCfg(
        depths=DEPTHS, embed_dim=8, num_heads=1, use_cls_token=cls, expand_attn=expand_attn
    )
    model = MultiScaleVit(cfg, img_size=SIZE, num_classes=num_classes)
    return randomize_(model, seed=seed).eval()


def named_timm_mvit(name: str = "mvitv2_tiny", seed: int = 2, num_classes: int = 5) -> nn.Module:
    """timm's ``name`` at 32 px (grids 8, 4, 2, 1)."""
    import timm

    model = timm.create_model(name, pretrained=False, num_classes=num_classes, img_size=NAMED_SIZE)
    return randomize_(model, seed=seed).eval()


def timm_logits_and_attention(model: nn.Module, x: Tensor) -> tuple[Tensor, list[Tensor]]:
    """timm's logits (B, C) and every block's probabilities (B, heads, P + Nq, P + Nk)."""
    with torch.no_grad(), Softmaxes() as mode:
        logits = model(x)
    return logits, mode.out


save_folder = save_timm_folder  # timm's own folder (config.json + model.safetensors)
