"""Tiny timm CrossViTs for the CrossViT kind's tests (random, perturbed weights): 120 px inputs
(timm's branch sizes need a branch-1 image of a multiple of 16 px: 112 = 120 · 224/240), branch
0 a 10×10 grid of 12 px, branch 1 resized to 112 px, a 7×7 grid of 16 px (tokens of 16·120/112
input px, as at timm's 240)."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from zoo_helpers import randomize_, save_timm_folder
from zoo_helpers import save_bare as save_bare

SIZE = 120
GRIDS = [(10, 10), (7, 7)]
PIXELS = [12, 16 * 120 / 112]
DIMS = (24, 48)
HEADS = (2, 4)
DEPTH = [[1, 2, 0], [1, 1, 0]]  # two multi-scale blocks: branch 0 + branch 1 blocks, fusion 1
# the attention layers in order: (kind, the branch whose grid the keys are on)
LAYERS = [
    ("self", 0), ("self", 1), ("self", 1), ("cross", 1), ("cross", 0),
    ("self", 0), ("self", 1), ("cross", 1), ("cross", 0),
]  # fmt: skip


def tiny_timm_crossvit(
    name: str = "crossvit_tiny_240", seed: int = 1, num_classes: int = 5, **kwargs
) -> nn.Module:
    """timm's ``name`` with widths 24/48, heads 2/4, two multi-scale blocks, at 120 px."""
    import timm

    model = timm.create_model(
        name, pretrained=False, num_classes=num_classes, img_size=SIZE, embed_dim=list(DIMS),
        depth=DEPTH, num_heads=list(HEADS), **kwargs,
    )  # fmt: skip
    return randomize_(model, seed=seed).eval()


def timm_attention(model: nn.Module, x: Tensor) -> tuple[Tensor, list[Tensor]]:
    """timm's eager forward: logits (B, C) and every attention layer's softmax in the order it
    runs (each branch's blocks, then the two fusions, per multi-scale block)."""
    attn: list[Tensor] = []
    handles = []
    for msb in model.blocks:
        for module in [*msb.blocks[0], *msb.blocks[1], *msb.fusion]:
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


save_folder = save_timm_folder  # timm's own folder (config.json + model.safetensors)
