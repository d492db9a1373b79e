"""Attention snapshot of one fixed image, taken after every epoch to show a model learning."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from vitviz import explain
from vitviz.model import VisionTransformer


def probe_maps(model: VisionTransformer, x: Tensor) -> tuple[np.ndarray, np.ndarray, int]:
    """Rollout and last-layer CLS attention of one normalised image x (1, 3, H, W).

    Returns the CLS rollout (gh, gw) float32 scaled to max 1, the last layer's mean-over-heads
    CLS attention to the patches (gh, gw) float32 (raw probabilities), and the predicted class.
    The model is left in the train/eval mode it was in.
    """
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            out = model.forward_explained(x, capture_attention=True)
    finally:
        model.train(was_training)
    attentions = [a.float() for a in out.attentions]  # L × (1, H, N, N)
    rollout = explain.rollout(attentions, out.grid, out.num_prefix_tokens)[0]  # (gh, gw)
    maps = explain.attention_maps(attentions[-1], out.grid, out.num_prefix_tokens, 0)  # (1,H,gh,gw)
    cls_map = maps[0].mean(dim=0)  # (gh, gw)
    predicted = int(out.logits[0].argmax()) if out.logits.shape[-1] else -1
    return (
        rollout.cpu().numpy().astype(np.float32),
        cls_map.cpu().numpy().astype(np.float32),
        predicted,
    )
