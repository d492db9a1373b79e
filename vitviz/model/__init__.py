"""The one ViT implementation of vitviz (pure torch)."""

from vitviz.model.config import ViTConfig
from vitviz.model.variants import VARIANT_NAMES, create_model, vit_config
from vitviz.model.vit import VisionTransformer, ViTOutput

__all__ = [
    "VARIANT_NAMES",
    "ViTConfig",
    "ViTOutput",
    "VisionTransformer",
    "create_model",
    "vit_config",
]
