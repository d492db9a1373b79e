"""Named ViT variants: the tutorials' CIFAR-10 model and the ViT-Ti/S/B/L family at patch 16."""

from __future__ import annotations

from typing import Any

from vitviz.blocks.config import ViTConfig
from vitviz.blocks.vit import VisionTransformer

_VARIANTS: dict[str, dict[str, Any]] = {
    # The "ViT from scratch" tutorials' CIFAR-10 model.
    "cifar10-tutorial": dict(
        image_size=32, patch_size=8, num_classes=10, dim=64, depth=4, heads=4, mlp_ratio=4.0
    ),
    "cifar10-tutorial-sincos": dict(
        image_size=32,
        patch_size=8,
        num_classes=10,
        dim=64,
        depth=4,
        heads=4,
        mlp_ratio=4.0,
        pos_embed="sincos",
    ),
    "vit-tiny": dict(image_size=224, patch_size=16, dim=192, depth=12, heads=3),
    "vit-small": dict(image_size=224, patch_size=16, dim=384, depth=12, heads=6),
    "vit-base": dict(image_size=224, patch_size=16, dim=768, depth=12, heads=12),
    "vit-large": dict(image_size=224, patch_size=16, dim=1024, depth=24, heads=16),
}

VARIANT_NAMES: tuple[str, ...] = tuple(_VARIANTS)


def vit_config(name: str, **overrides: Any) -> ViTConfig:
    """The config of a named variant, with any field overridden."""
    if name not in _VARIANTS:
        raise ValueError(f"unknown ViT variant {name!r}; known: {', '.join(VARIANT_NAMES)}")
    return ViTConfig(**{**_VARIANTS[name], **overrides})


def create_model(name: str, **overrides: Any) -> VisionTransformer:
    """A freshly initialised model of a named variant."""
    return VisionTransformer(vit_config(name, **overrides))
