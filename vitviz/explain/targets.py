"""The class each image of a batch is explained for."""

from __future__ import annotations

import torch
from torch import Tensor


def target_classes(logits: Tensor, target: int | Tensor | None) -> Tensor:
    """(B, C) logits -> (B,) long classes: ``target`` (one class or one per image), or each
    row's top class for None. ValueError for a class out of range."""
    B, C = logits.shape
    if target is None:
        return logits.detach().argmax(dim=1)
    t = torch.as_tensor(target, device=logits.device).long().reshape(-1)
    if t.numel() == 1:
        t = t.expand(B)
    if t.numel() != B:
        raise ValueError(f"{t.numel()} target classes for a batch of {B} images")
    if int(t.min()) < 0 or int(t.max()) >= C:
        raise ValueError(f"class index out of range: the model has {C} classes (0..{C - 1})")
    return t
