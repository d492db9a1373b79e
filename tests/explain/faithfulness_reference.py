"""The plain reference the faithfulness tests (the ViT's in tests/explain, the Swin's in
tests/kinds/swin) hold vitviz's batched curves to: written from the definition, one perturbed
image at a time, patches blanked or restored pixel block by pixel block (DESIGN §5)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn


def ref_order(values: Sequence[Sequence[float]]) -> list[int]:
    """The patches' flat indices, highest value first, ties by index."""
    flat = [float(v) for row in values for v in row]
    return sorted(range(len(flat)), key=lambda i: (-flat[i], i))


def ref_probability(model: nn.Module, x: Tensor, target: int) -> float:
    """``model``'s softmax probability of ``target`` on the one image ``x`` (C, H, W)."""
    with torch.no_grad():
        return float(torch.softmax(model(x[None]), dim=-1)[0, target])


def ref_curves(
    model: nn.Module, x: Tensor, values: Tensor, steps: int, patch: int | None = None
) -> tuple[int, list[float], list[float]]:
    """(target, p_0 … p_S of deletion, of insertion) of ``x`` (C, H, W) for the (H/p, W/p) map
    ``values``, p the ``patch`` size (default: the model config's)."""
    patch = model.config.patch_size if patch is None else patch
    gh, gw = x.shape[1] // patch, x.shape[2] // patch
    P = gh * gw
    with torch.no_grad():
        target = int(model(x[None])[0].argmax())
    order = ref_order(values.tolist())
    deletion, insertion = [], []
    for k in range(steps + 1):
        m = (k * P + steps // 2) // steps
        blanked, restored = x.clone(), torch.zeros_like(x)
        for index in order[:m]:
            r, c = divmod(index, gw)
            rows, cols = slice(r * patch, (r + 1) * patch), slice(c * patch, (c + 1) * patch)
            blanked[:, rows, cols] = 0.0
            restored[:, rows, cols] = x[:, rows, cols]
        deletion.append(ref_probability(model, blanked, target))
        insertion.append(ref_probability(model, restored, target))
    return target, deletion, insertion


def ref_auc(curve: Sequence[float]) -> float:
    """The trapezoid area under ``curve`` over [0, 1]."""
    S = len(curve) - 1
    total = 0.0
    for k in range(S):
        total += (curve[k] + curve[k + 1]) / 2
    return total / S
