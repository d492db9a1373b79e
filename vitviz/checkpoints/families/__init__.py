"""Checkpoint families: one converter per family, recognised by key names, tried in order.

Each entry is (name, detect, convert); the first whose ``detect`` accepts a checkpoint converts
it to a model of some kind. The order (``all_families``): vitviz's own state dict with its
config; then each registered kind's families (``vitviz.kinds``: ``ModelKind.families``, in
registration order, read when first asked); then the ViT's generic layouts, more specific ones
before the general ones (DINO's sentinel keys before timm's layout, which DINO shares).
"""

from __future__ import annotations

from vitviz.checkpoints.families import (
    dino,
    hf_dinov3,
    huggingface,
    lucidrains,
    own,
    timm,
    timm_beit,
    timm_eva,
    timm_hybrid,
    torchvision,
    tutorial,
)
from vitviz.checkpoints.families.base import Conversion, Family, Source

# The ViT's generic layouts, tried after the kinds' own families.
GENERIC: tuple[Family, ...] = (
    torchvision.FAMILY,
    hf_dinov3.FAMILY,  # before the generic Hugging Face ViT: its model_type decides
    huggingface.FAMILY,
    dino.FAMILY,
    timm_beit.FAMILY,  # before timm's ViT: a timm folder of a BEiT is claimed here
    timm_hybrid.FAMILY,  # before timm's ViT: a ResNet before the tokens (patch_embed.backbone)
    timm_eva.FAMILY,  # likewise EVA / rotary ViTs (timm's Eva class)
    timm.FAMILY,
    lucidrains.FAMILY,
    tutorial.FAMILY,
)


def all_families() -> tuple[Family, ...]:
    """Every family, in the order they are tried."""
    from vitviz.kindapi import all_kinds

    by_kind = tuple(family for kind in all_kinds() for family in kind.families)
    return (own.FAMILY, *by_kind, *GENERIC)


def find_family(source: Source) -> Family | None:
    """The first family whose key names match ``source``, or None."""
    return next((f for f in all_families() if f.detect(source)), None)


__all__ = ["GENERIC", "Conversion", "Family", "Source", "all_families", "find_family"]
