"""The ViT's checkpoint families: the generic layouts of timm, transformers, torchvision, DINO,
lucidrains and the tutorials, tried after every other kind's families (the ViT kind is registered
last), more specific ones before the general ones."""

from __future__ import annotations

from vitviz.checkpoints.families.base import Family
from vitviz.kinds.vit.families import (
    dino,
    hf_dinov3,
    huggingface,
    lucidrains,
    timm,
    timm_beit,
    timm_eva,
    timm_hybrid,
    torchvision,
    tutorial,
)

FAMILIES: tuple[Family, ...] = (
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
