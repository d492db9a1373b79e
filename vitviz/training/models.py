"""The model a training run builds: vitviz's ViT or Swin, from its TrainConfig."""

from __future__ import annotations

from torch import nn

from vitviz.kinds.swin.config import SwinConfig
from vitviz.kinds.swin.network import SwinTransformer
from vitviz.model import VisionTransformer, ViTConfig
from vitviz.training.config import TrainConfig


def build_model(cfg: TrainConfig, num_classes: int, channels: int) -> nn.Module:
    """A freshly initialised VisionTransformer (``model="vit"``) or SwinTransformer
    (``model="swin"``) for ``num_classes`` classes and ``channels``-channel images."""
    if cfg.model == "swin":
        return SwinTransformer(SwinConfig(**cfg.swin_kwargs(num_classes, channels)))
    return VisionTransformer(ViTConfig(**cfg.model_kwargs(num_classes, channels)))
