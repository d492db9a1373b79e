"""Tiny timm VOLOs for the VOLO kind's tests (random, perturbed weights, BatchNorm statistics
too): 64 px inputs, patch 8 (an 8×8 outlook grid, 4×4 after the downsample), widths 24/48 with
timm's volo_d1 heads (6, 12), one or two blocks a stage, two class blocks."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor, nn
from zoo_helpers import randomize_, save_timm_folder
from zoo_helpers import save_bare as save_bare

SIZE = 64
GRIDS = [(8, 8), (4, 4)]
DIMS = (24, 48, 48, 48)
HEADS = (6, 12, 12, 12)
DEPTHS = (2, 1, 1, 1)
KINDS = ["outlook", "outlook", "self", "self", "self", "class", "class"]


# volo_d2_224's heads (8, 16) at widths 32/64, one block a stage and one class block: five
# layers whose heads the multi-layer plan cuts across layers at 3 rows and at all of them (the
# shared tests ask it)
D2 = dict(
    layers=(1, 1, 1, 1), embed_dims=(32, 64, 64, 64), num_heads=(8, 16, 16, 16),
    post_layers=("ca",),
)  # fmt: skip


def tiny_timm_volo(
    seed: int = 1, num_classes: int = 5, name: str = "volo_d1_224", **kwargs
) -> nn.Module:
    """timm's VOLO with ``name``'s heads at tiny sizes (volo_d1_224: ``DEPTHS``, ``DIMS``;
    volo_d2_224: ``D2``), every parameter and BatchNorm statistic perturbed; named ``name`` for
    timm's folder."""
    import timm
    from timm.models.volo import VOLO

    sizes = D2 if name == "volo_d2_224" else dict(layers=DEPTHS, embed_dims=DIMS, num_heads=HEADS)
    args = dict(stem_hidden_dim=8, img_size=SIZE, num_classes=num_classes, **sizes)
    args.update(kwargs)
    model = randomize_(VOLO(**args), seed=seed)
    g = torch.Generator().manual_seed(50 + seed)
    with torch.no_grad():
        for m in model.patch_embed.conv:
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.copy_(0.2 * torch.randn(m.running_mean.shape, generator=g))
                m.running_var.copy_(0.5 + torch.rand(m.running_var.shape, generator=g))
    model.pretrained_cfg = dict(timm.models.get_pretrained_cfg(name).to_dict())
    model.pretrained_cfg["architecture"] = name
    return model.eval()


def save_folder(model: nn.Module, folder: Path) -> Path:
    """timm's own folder (config.json + model.safetensors)."""
    return save_timm_folder(model, folder, img_size=SIZE)


def timm_attention(model: nn.Module, x: Tensor) -> tuple[Tensor, list[Tensor]]:
    """timm's forward: logits (B, C) and every attention layer's weights in the order it runs
    (outlookers (B, heads, L, 9, 9), transformer blocks, class blocks)."""
    attn: list[Tensor] = []
    handles = []
    stages = [s for s in model.network if isinstance(s, nn.Sequential)]
    for module in [*(b for s in stages for b in s), *model.post_network]:
        module.attn.fused_attn = False
        hook = module.attn.attn_drop.register_forward_hook(lambda _m, _i, o: attn.append(o))
        handles.append(hook)
    try:
        with torch.no_grad():
            logits = model(x)
    finally:
        for h in handles:
            h.remove()
    return logits, attn
