"""Ablation-CAM (Desai & Ramaswamy 2020; DESIGN §5): each channel of a layer's features
weighted by how much the class's score drops when that channel is zeroed, no gradient.

y_c the class's logit; y_c^k the logit with channel k of the layer's output tokens set to 0 at
every token (prefix tokens too), inside the pass, so later blocks see it; w_k = (y_c − y_c^k) /
y_c; map = ReLU(Σ_k w_k A_k). C forward passes, ``CAM_BATCH`` at a time, after the one that
reads A and y_c.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

from vitviz.explain.cam_layer import (
    batched_scores,
    cam_from_weights,
    layer_pass,
    passes_method,
)
from vitviz.kindapi import ModelKind
from vitviz.kindapi.feature_sites import DEFAULT_LAYER, parse_layer


def ablation_cam(
    kind: ModelKind, model: nn.Module, x: Tensor, layer: str = DEFAULT_LAYER,
    target: int | None = None,
) -> Tensor:  # fmt: skip
    """Ablation-CAM of one image x (1, C, H, W) on ``layer``: (h, w), unscaled."""
    lp = layer_pass(kind, model, x, layer, target, gradients=False)
    acts = lp.activations[0]  # (C, h, w)
    c = int(lp.target[0])
    y = lp.logits[0, c]
    site = kind.feature_site(model, x, parse_layer(layer))

    def inputs(idx: Sequence[int]) -> Tensor:
        return x.expand(len(idx), *x.shape[1:])

    def ablate(tokens: Tensor, idx: Sequence[int]) -> Tensor:
        out = tokens.clone()
        for j, k in enumerate(idx):
            out[j, ..., k] = 0
        return out

    def score(logits: Tensor, idx: Sequence[int]) -> Tensor:
        return logits[:, c]

    ablated = batched_scores(kind, model, inputs, acts.shape[0], score, site=site, edit=ablate)
    weights = (y.double() - ablated.double()) / y.double()
    return cam_from_weights(acts[None].double(), weights[None])[0]


ablationcam_method = passes_method("ablationcam", ablation_cam)  # the table's Ablation-CAM
