"""The model a training run builds: its kind's network, from its TrainConfig."""

from __future__ import annotations

from torch import nn

from vitviz.training.config import TrainConfig


def build_model(cfg: TrainConfig, num_classes: int, channels: int) -> nn.Module:
    """A freshly initialised network of the kind ``cfg.model`` names (its training side's
    ``build``) for ``num_classes`` classes and ``channels``-channel images."""
    return cfg.side.build(cfg, num_classes, channels)
