"""Shared by the Swin tests: tiny random Swins of each library, and ours run both ways."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from zoo_helpers import max_diff, randomize_

# Tiny: patch 4, width 24 -> 48, depths (2, 2), heads (2, 4).
EMBED, DEPTHS, HEADS = 24, (2, 2), (2, 4)


def tiny_torchvision_swin(
    window: int = 4, classes: int = 5, seed: int = 0, version: int = 1
) -> nn.Module:
    from torchvision.models import swin_transformer as tv

    v2 = dict(block=tv.SwinTransformerBlockV2, downsample_layer=tv.PatchMergingV2)
    model = tv.SwinTransformer(
        **(v2 if version == 2 else {}),
        patch_size=[4, 4],
        embed_dim=EMBED,
        depths=list(DEPTHS),
        num_heads=list(HEADS),
        window_size=[window, window],
        num_classes=classes,
    )
    return randomize_(model, seed=seed)


def tiny_timm_swin(
    img_size: int | tuple[int, int],
    window: int = 4,
    classes: int = 5,
    seed: int = 0,
    version: int = 1,
) -> nn.Module:
    import timm

    model = timm.create_model(
        "swin_tiny_patch4_window7_224" if version == 1 else "swinv2_tiny_window8_256",
        pretrained=False,
        img_size=img_size,
        embed_dim=EMBED,
        depths=DEPTHS,
        num_heads=HEADS,
        window_size=window,
        num_classes=classes,
    )
    return randomize_(model, seed=seed)


def tiny_hf_swin(
    window: int = 4, classes: int = 5, seed: int = 0, image_size: int = 64, version: int = 1
):
    import transformers as tr

    kind = tr.SwinConfig if version == 1 else tr.Swinv2Config
    model = tr.SwinForImageClassification if version == 1 else tr.Swinv2ForImageClassification
    config = kind(
        image_size=image_size,
        patch_size=4,
        embed_dim=EMBED,
        depths=list(DEPTHS),
        num_heads=list(HEADS),
        window_size=window,
        num_labels=classes,
    )
    return randomize_(model(config), seed=seed)


def run_ours(model: nn.Module, x: Tensor):
    """Logits of the fused path and the explained output (checked to agree)."""
    with torch.no_grad():
        logits = model(x)
        out = model.forward_explained(x)
    assert max_diff(out.logits, logits) < 1e-5, "capture path differs from the fused path"
    return logits, out


def tiny_timm_swin_cr(
    img_size: int | tuple[int, int] = 64,
    window: int | None = 4,
    classes: int = 5,
    seed: int = 0,
    name: str = "swinv2_cr_tiny_224",
    **extra,
) -> nn.Module:
    """timm's SwinV2-CR ``name`` at width 16, depths (2, 2), heads (2, 4), perturbed (window
    None: timm's own, the patch grid ÷ 8)."""
    import timm

    sized = {} if window is None else {"window_size": window}
    model = timm.create_model(
        name,
        pretrained=False,
        img_size=img_size,
        embed_dim=16,
        depths=DEPTHS,
        num_heads=HEADS,
        num_classes=classes,
        **sized,
        **extra,
    )
    return randomize_(model, seed=seed).eval()


def timm_cr_attention(model: nn.Module, x: Tensor) -> tuple[Tensor, list[Tensor]]:
    """timm's SwinV2-CR logits and each block's probabilities (B·windows, heads, n, n), read
    after its attention dropout (the identity in eval mode)."""
    attn: list[Tensor] = []
    handles = [
        block.attn.attn_drop.register_forward_hook(lambda _m, _i, o: attn.append(o))
        for stage in model.stages
        for block in stage.blocks
    ]
    try:
        with torch.no_grad():
            logits = model(x)
    finally:
        for h in handles:
            h.remove()
    return logits, attn
