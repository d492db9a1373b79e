"""Tiny timm PiTs for the PiT kind's tests (random, perturbed weights): 48 px inputs, stem
16/8, stage grids 5×5, 3×3, 2×2."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from zoo_helpers import randomize_, save_timm_folder
from zoo_helpers import save_bare as save_bare

SIZE = 48
HEADS = (2, 2, 4)
STRIDE = 8


def tiny_timm_pit(distilled: bool = False, seed: int = 1, num_classes: int = 5) -> nn.Module:
    """timm's pit_ti_224 (or its distilled twin) with widths 16-16-32, depths 1-2-1, heads
    2-2-4, at 48 px."""
    import timm

    name = "pit_ti_distilled_224" if distilled else "pit_ti_224"
    model = timm.create_model(
        name, pretrained=False, num_classes=num_classes, img_size=SIZE,
        base_dims=[8, 8, 8], depth=[1, 2, 1], heads=list(HEADS),
    )  # fmt: skip
    return randomize_(model, seed=seed)


BARE_SETTINGS = {"stage_heads": list(HEADS), "stride": STRIDE}


def timm_blocks(model: nn.Module) -> list[nn.Module]:
    return [b for stage in model.transformers for b in stage.blocks]


def timm_attention_and_gradients(
    model: nn.Module, x: Tensor, target: int | None = None
) -> tuple[Tensor, list[Tensor], list[Tensor], int]:
    """timm's eager forward: logits (C,), each block's attention (heads, P + N, P + N) and its
    gradient ∂y_c/∂A, and the class c."""
    attn: list[Tensor] = []
    handles = []
    for block in timm_blocks(model):
        block.attn.fused_attn = False
        handles.append(block.attn.attn_drop.register_forward_hook(lambda _m, _i, o: attn.append(o)))
    try:
        logits = model(x)[0]
    finally:
        for h in handles:
            h.remove()
    c = int(logits.argmax()) if target is None else target
    grads = torch.autograd.grad(logits[c], attn)
    return logits.detach(), [a[0].detach() for a in attn], [g[0] for g in grads], c


save_folder = save_timm_folder  # timm's own folder (config.json + model.safetensors)
