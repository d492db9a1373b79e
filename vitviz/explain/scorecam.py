"""Score-CAM (Wang et al. 2020; DESIGN §5): each channel of a layer's features weighted by the
class's softmax probability when the input is seen through that channel alone, no gradient.

For channel k of A (C, h, w): M_k = A_k upsampled bilinearly to the input's H × W (corner
cells' centres on the image's corners, ``align_corners=True``, as pytorch-grad-cam's
``UpsamplingBilinear2d``), min-max scaled to [0, 1] (a constant channel: all zero); the masked
input x ⊙ M_k (x the model's normalised input); s_k = softmax(f(x ⊙ M_k))_c; map =
ReLU(Σ_k s_k A_k). C forward passes, ``CAM_BATCH`` at a time, after the one that reads A.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vitviz.explain.cam_layer import (
    batched_scores,
    cam_from_weights,
    layer_pass,
    passes_method,
)
from vitviz.kindapi import ModelKind
from vitviz.kindapi.feature_sites import DEFAULT_LAYER


def channel_masks(activations: Tensor, size: tuple[int, int]) -> Tensor:
    """(n, h, w) channels -> (n, H, W) masks: upsampled bilinearly, each min-max scaled to
    [0, 1] (a constant channel gives zeros)."""
    up = F.interpolate(activations[:, None], size=size, mode="bilinear", align_corners=True)
    up = up[:, 0]
    lo = up.flatten(1).amin(dim=1)[:, None, None]
    span = up.flatten(1).amax(dim=1)[:, None, None] - lo
    return torch.where(span > 0, (up - lo) / span.clamp_min(torch.finfo(up.dtype).tiny), 0.0)


def score_cam(
    kind: ModelKind, model: nn.Module, x: Tensor, layer: str = DEFAULT_LAYER,
    target: int | None = None,
) -> Tensor:  # fmt: skip
    """Score-CAM of one image x (1, C, H, W) on ``layer``: (h, w), unscaled."""
    lp = layer_pass(kind, model, x, layer, target, gradients=False)
    acts = lp.activations[0]  # (C, h, w)
    c = int(lp.target[0])
    size = (int(x.shape[-2]), int(x.shape[-1]))

    def inputs(idx: Sequence[int]) -> Tensor:
        masks = channel_masks(acts[list(idx)].to(x.dtype), size)  # (n, H, W)
        return x * masks[:, None]

    def score(logits: Tensor, idx: Sequence[int]) -> Tensor:
        return kind.probabilities(model, logits)[:, c]

    weights = batched_scores(kind, model, inputs, acts.shape[0], score)
    return cam_from_weights(acts[None].double(), weights[None].double())[0]


scorecam_method = passes_method("scorecam", score_cam)  # the table's Score-CAM
