"""NaN and infinity are never a prediction: the check analyze runs on what it computed."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor

from vitviz.core.errors import VitvizError


class NonFiniteError(VitvizError):
    """The model input, logits, attention or gradients hold NaN or infinity (nothing shown)."""


def all_finite(t: Tensor) -> bool:
    """Whether every entry of ``t`` is finite: max |t| is NaN or infinite iff one entry is (the
    reduction carries NaN), one pass without a boolean copy of ``t``."""
    return t.numel() == 0 or bool(torch.isfinite(t.abs().amax()))


def check_finite(
    x: Tensor, logits: Tensor, attention: Tensor, gradients: Iterable[Tensor] = ()
) -> None:
    """Raise NonFiniteError naming the first part that is not finite, the input first (its
    cause is the preprocessing, not the model).

    x: (C, H, W) the normalised input; logits: (C,) or (B, C); attention: (L, H, N, N);
    gradients: L × (1, H, N, N).
    """
    if not all_finite(x):
        raise NonFiniteError(
            "the model input holds NaN or infinite values after normalisation: the "
            "preprocessing's mean and std must keep pixel values within float32 range"
        )
    if not all_finite(logits):
        raise NonFiniteError(
            "the model's logits are NaN or infinite, so there is no prediction: the weights "
            "hold NaN or infinite values, or the numbers overflow float32"
        )
    # Probabilities in [0, 1] can't overflow a sum: one finite sum means every entry is finite.
    if not all(bool(torch.isfinite(a.sum())) for a in attention):
        raise NonFiniteError(
            "the model's attention is NaN or infinite, so there are no maps to show: the "
            "weights hold NaN or infinite values, or the numbers overflow float32"
        )
    if not all(all_finite(g) for g in gradients):
        raise NonFiniteError(
            "the attention gradients are NaN or infinite, so the gradient maps can't be shown: "
            "the numbers overflow float32"
        )
