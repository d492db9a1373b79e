"""Tiny timm MobileViTs for the MobileViT kind's tests (random, perturbed weights and BatchNorm
running statistics): timm's ByobNet built with a MobileViT's blocks (widths 8-16, two MobileViT
blocks of 2 and 1 layers), and timm's own mobilevit_xxs at 64 px."""

from __future__ import annotations

import torch
from torch import nn
from zoo_helpers import randomize_, save_timm_folder
from zoo_helpers import save_bare as save_bare

SIZE = 64  # tiny: stage maps 32, 16, 8, 4 (2×2 patches: 4×4 and 2×2 patch grids)
HEADS = (0, 0, 2, 2)
STRIDES = (1, 2, 2, 2)
BARE_SETTINGS = {"stage_heads": list(HEADS), "patch_size": 2, "strides": list(STRIDES)}


def perturbed_(model: nn.Module, seed: int) -> nn.Module:
    """``randomize_``, every BatchNorm's statistics measured on random images (so the features
    keep depending on the input) and then perturbed (mean shifted, variance scaled)."""
    randomize_(model, seed=seed, scale=0.3)
    g = torch.Generator().manual_seed(seed + 100)
    model.train()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.momentum = None  # the cumulative average of the batches below
    with torch.no_grad():
        model(torch.randn(8, 3, SIZE, SIZE, generator=g))
        for name, buf in model.named_buffers():
            if name.endswith("running_mean"):
                buf.add_(0.1 * torch.randn(buf.shape, generator=g))
            elif name.endswith("running_var"):
                buf.mul_(0.8 + 0.4 * torch.rand(buf.shape, generator=g))
    return model.eval()


def tiny_timm_mobilevit(
    seed: int = 1,
    num_classes: int = 5,
    dims: tuple[int, int] = (16, 24),
    mlp_ratios: tuple[float, float] = (2.0, 2.0),
) -> nn.Module:
    """timm's ByobNet with MobileViT blocks: stem 8, stages 8 (IR), 16 (IR ×2, stride 2),
    16 (IR + MobileViT of width ``dims[0]`` (16), 2 layers, 2 heads), 16 (IR + MobileViT of
    width ``dims[1]`` (24), 1 layer, 2 heads), final conv 32; each MobileViT block's MLP
    int(width · ``mlp_ratios``) wide."""
    from timm.models.byobnet import ByoBlockCfg, ByobNet, ByoModelCfg

    def ir(d: int, c: int, s: int) -> ByoBlockCfg:
        return ByoBlockCfg(type="bottle", d=d, c=c, s=s, gs=1, br=2.0,
                           block_kwargs=dict(bottle_in=True, linear_out=True))  # fmt: skip

    def mvit(c: int, dim: int, depth: int, mlp_ratio: float) -> ByoBlockCfg:
        return ByoBlockCfg(type="mobilevit", d=1, c=c, s=1, block_kwargs=dict(
            transformer_dim=dim, transformer_depth=depth, patch_size=2, num_heads=2,
            mlp_ratio=mlp_ratio,
        ))  # fmt: skip

    cfg = ByoModelCfg(
        blocks=(ir(1, 8, 1), ir(2, 16, 2), (ir(1, 16, 2), mvit(16, dims[0], 2, mlp_ratios[0])),
                (ir(1, 16, 2), mvit(16, dims[1], 1, mlp_ratios[1]))),
        stem_chs=8, stem_type="3x3", stem_pool="", downsample="", act_layer="silu",
        num_features=32,
    )  # fmt: skip
    return perturbed_(ByobNet(cfg=cfg, num_classes=num_classes), seed)


def timm_xxs(seed: int = 2, num_classes: int = 5) -> nn.Module:
    """timm's own mobilevit_xxs (1.3 M parameters), perturbed."""
    import timm

    return perturbed_(timm.create_model("mobilevit_xxs", num_classes=num_classes), seed)


def timm_attention(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """timm's eager forward: logits and each transformer layer's attention (B·P, heads, N, N)."""
    attn: list[torch.Tensor] = []
    handles = []
    for stage in model.stages:
        for block in stage:
            for layer in getattr(block, "transformer", ()):
                layer.attn.fused_attn = False
                handles.append(
                    layer.attn.attn_drop.register_forward_hook(lambda _m, _i, o: attn.append(o))
                )
    try:
        with torch.no_grad():
            logits = model(x)
    finally:
        for h in handles:
            h.remove()
    return logits, attn


def tiny_hf_mobilevit(seed: int = 3, base: bool = False) -> nn.Module:
    """transformers' MobileViT (for image classification, or the base model) with widths
    8-32, transformer widths 16-16-24, 2 heads, expand ratio 2, perturbed, 64 px."""
    import transformers as tr

    cfg = tr.MobileViTConfig(
        image_size=SIZE, neck_hidden_sizes=[8, 8, 16, 16, 16, 24, 32], hidden_sizes=[16, 16, 24],
        num_attention_heads=2, expand_ratio=2.0, num_labels=5,
    )  # fmt: skip
    model = tr.MobileViTModel(cfg) if base else tr.MobileViTForImageClassification(cfg)
    perturbed_(getattr(model, "mobilevit", model), seed)
    return model.eval()


def hf_attention(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """transformers' forward: logits (the pooled features of a base model) and each layer's
    attention probabilities (B·P, heads, N, N)."""
    attn: list[torch.Tensor] = []
    base = getattr(model, "mobilevit", model)
    handles = [
        layer.attention.attention.dropout.register_forward_hook(lambda _m, _i, o: attn.append(o))
        for stage in base.encoder.layer
        for layer in getattr(getattr(stage, "transformer", None), "layer", ())
    ]
    try:
        with torch.no_grad():
            out = model(pixel_values=x)
    finally:
        for h in handles:
            h.remove()
    logits = out.logits if hasattr(out, "logits") else out.pooler_output
    return logits, attn


save_folder = save_timm_folder  # timm's own folder (config.json + model.safetensors)
