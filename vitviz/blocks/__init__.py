"""The transformer blocks several kinds build on (pure torch, as timm's ``layers``): attention,
MLPs, norms, positions, stems, and the token-layout backbone (``VisionTransformer`` and its
``ViTConfig``) that the ViT, CLIP/SigLIP towers, CaiT and XCiT networks reuse (DESIGN §3)."""

from vitviz.blocks.config import ViTConfig
from vitviz.blocks.variants import VARIANT_NAMES, create_model, vit_config
from vitviz.blocks.vit import VisionTransformer, ViTOutput

__all__ = [
    "VARIANT_NAMES",
    "ViTConfig",
    "ViTOutput",
    "VisionTransformer",
    "create_model",
    "vit_config",
]
