"""Tiny timm LeViTs for the LeViT kind's tests (random, perturbed weights and BatchNorm
statistics): 64 px inputs, stem stride 16, stage grids 4×4, 2×2, 1×1."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from zoo_helpers import randomize_, save_timm_folder
from zoo_helpers import save_bare as save_bare

SIZE = 64
DIMS, KEY_DIM, HEADS, DEPTHS = (16, 24, 32), 4, (2, 3, 4), (1, 2, 1)
GRIDS = [(4, 4), (2, 2), (1, 1)]
LAYER_STAGES = [0, 1, 1, 1, 2, 2]  # each attention layer's stage (a subsample first)
BARE_SETTINGS = {"activation": "hard_swish"}


def randomize_levit_(model: nn.Module, seed: int) -> nn.Module:
    """``randomize_``, then every Linear's and conv's weight at its own scale (N(0, 1/fan_in):
    a full-size LeViT's logits stay finite), every BatchNorm's weight around 1 and its running
    mean and variance random (a library's init, unit norms and zero means, would hide a wrong
    fold), the attention biases of order 1."""
    randomize_(model, seed=seed)
    g = torch.Generator().manual_seed(50 + seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.Linear, nn.Conv2d)):
                w = torch.randn(m.weight.shape, generator=g)
                m.weight.copy_(w / m.weight[0].numel() ** 0.5)
            elif isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
                m.weight.copy_(1 + 0.2 * torch.randn(m.weight.shape, generator=g))
                m.bias.copy_(0.2 * torch.randn(m.bias.shape, generator=g))
                m.running_mean.copy_(0.3 * torch.randn(m.running_mean.shape, generator=g))
                m.running_var.copy_(0.5 + torch.rand(m.running_var.shape, generator=g))
            elif hasattr(m, "attention_biases"):
                m.attention_biases.copy_(torch.randn(m.attention_biases.shape, generator=g))
    return model.eval()


def tiny_timm_levit(
    distilled: bool = True,
    conv: bool = False,
    seed: int = 1,
    num_classes: int = 5,
    act_layer: str | None = None,
    stem_type: str | None = None,
    size: int = SIZE,
) -> nn.Module:
    """timm's levit_128s (levit_conv_128s) with widths 16-24-32, key_dim 4, heads 2-3-4,
    depths 1-2-1, at ``size`` px; ``distilled`` False: timm's Levit without head_dist; ``stem_type``
    "s8": the stride-8 stem of three convs."""
    import timm

    name = "levit_conv_128s" if conv else "levit_128s"
    extra = {} if act_layer is None else {"act_layer": act_layer}
    extra |= {} if stem_type is None else {"stem_type": stem_type}
    model = timm.create_model(
        name, pretrained=False, num_classes=num_classes, img_size=size, embed_dim=DIMS,
        key_dim=KEY_DIM, num_heads=HEADS, depth=DEPTHS, distilled=distilled, **extra,
    )  # fmt: skip
    return randomize_levit_(model, seed)


def timm_layers(model: nn.Module) -> list[nn.Module]:
    """timm's attention modules in vitviz's order: a stage's subsample, then its blocks'."""
    out = []
    for stage in model.stages:
        if hasattr(stage.downsample, "attn_downsample"):
            out.append(stage.downsample.attn_downsample)
        out += [b.attn for b in stage.blocks]
    return out


def timm_attention_and_gradients(
    model: nn.Module, x: Tensor, target: int | None = None
) -> tuple[Tensor, list[Tensor], list[Tensor], int]:
    """timm's forward: logits (C,), each attention layer's probabilities (heads, N_q, N_k),
    recomputed from timm's own q, k and bias inside its pass (so its gradient ∂y_c/∂A flows
    through timm's graph), and the class c."""
    from vitviz.kinds.levit.families import library_probabilities

    attn: list[Tensor] = []
    handles = [library_probabilities(m, attn, keep_graph=True) for m in timm_layers(model)]
    try:
        logits = model(x)[0]
    finally:
        for h in handles:
            h.remove()
    c = int(logits.argmax()) if target is None else target
    grads = torch.autograd.grad(logits[c], attn)
    return logits.detach(), [a[0].detach() for a in attn], [g[0] for g in grads], c


save_folder = save_timm_folder  # timm's own folder (config.json + model.safetensors)
