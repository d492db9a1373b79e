"""Attention snapshot of one fixed image, taken after every epoch to show a model learning."""

from __future__ import annotations

import numpy as np
from torch import Tensor, nn

from vitviz.kindapi.sides import TrainingSide


def probe_maps(
    side: TrainingSide, model: nn.Module, x: Tensor
) -> tuple[np.ndarray, np.ndarray, int]:
    """The probe of one normalised image x (1, C, H, W), drawn by the training side of the
    model's kind (``side``: the run's, ``TrainConfig.side``; ``TrainingSide.probe_maps``): its
    rollout over the clickable grid (gh, gw) float32 scaled to max 1 (a ViT's CLS rollout, a
    Swin's windowed rollout from the average pool), its last layer's attention map float32 (a
    ViT's mean-over-heads CLS attention to the patches, a Swin's last block read from the
    average-pooled query), and the predicted class.
    The model is left in the train/eval mode it was in.
    """
    return side.probe_maps(model, x)
