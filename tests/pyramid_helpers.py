"""Tiny timm PVT v2 models for the pyramid kind's tests (random, perturbed weights)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import Tensor, nn
from zoo_helpers import randomize_

SIZE = 64  # input pixels: stage grids 16×16, 8×8, 4×4, 2×2
HEADS = (1, 2, 2, 4)


def tiny_timm_pvt(linear: bool = False, seed: int = 1, num_classes: int = 5) -> nn.Module:
    """timm's pvt_v2_b0 with depths 1-2-1-1, widths 16-32-48-64, heads 1-2-2-4, MLP ratio 2."""
    import timm

    model = timm.create_model(
        "pvt_v2_b0",
        pretrained=False,
        num_classes=num_classes,
        depths=(1, 2, 1, 1),
        embed_dims=(16, 32, 48, 64),
        num_heads=HEADS,
        mlp_ratios=(2, 2, 2, 2),
        linear=linear,
    )
    return randomize_(model, seed=seed)


def save_bare(model: nn.Module, path: Path) -> Path:
    """torch.save of the state dict, with the head counts and image size in its sidecar."""
    torch.save(model.state_dict(), path)
    settings = {"stage_heads": list(HEADS), "preprocessing": {"image_size": [SIZE, SIZE]}}
    path.with_name(path.name + ".vitviz.json").write_text(json.dumps(settings))
    return path


def save_folder(model: nn.Module, folder: Path) -> Path:
    """timm's own folder (config.json + model.safetensors), images prepared at SIZE."""
    from timm.models import save_for_hf

    save_for_hf(model, folder, safe_serialization=True)
    settings = {"preprocessing": {"image_size": [SIZE, SIZE]}}
    folder.with_name(folder.name + ".vitviz.json").write_text(json.dumps(settings))
    return folder


def timm_attention_and_gradients(
    model: nn.Module, x: Tensor, target: int | None = None
) -> tuple[Tensor, list[Tensor], list[Tensor], int]:
    """timm's eager forward: logits (C,), each block's attention (heads, N, M) and its gradient
    ∂y_c/∂A (the probabilities as timm's attention dropout hands them on), and the class c."""
    attn: list[Tensor] = []
    handles = []
    for stage in model.stages:
        for block in stage.blocks:
            block.attn.fused_attn = False
            handles.append(
                block.attn.attn_drop.register_forward_hook(lambda _m, _i, o: attn.append(o))
            )
    try:
        logits = model(x)[0]
    finally:
        for h in handles:
            h.remove()
    c = int(logits.argmax()) if target is None else target
    grads = torch.autograd.grad(logits[c], attn)
    return logits.detach(), [a[0].detach() for a in attn], [g[0] for g in grads], c
