"""Ablation-CAM (Desai & Ramaswamy 2020; DESIGN §5): each channel of a layer's features
weighted by how much the class's score drops when that channel is zeroed, no gradient.

y_c the class's logit; y_c^k the logit with channel k of the layer's output tokens set to 0 at
every token (prefix tokens too), inside the pass, so later blocks see it; w_k = (y_c − y_c^k) /
y_c; map = ReLU(Σ_k w_k A_k). C forward passes, ``CAM_BATCH`` at a time, after the one that
reads A and y_c.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from torch import Tensor, nn

from vitviz.explain.cam_layer import (
    analysis_input,
    batched_scores,
    cached,
    cam_from_weights,
    layer_pass,
)
from vitviz.explain.tokens import min_max_scale
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


def ablationcam_method(
    analysis: Any, query: object, target_class: int | None, params: Mapping[str, Any]
) -> Tensor:
    """The table's Ablation-CAM on layer ``params['layer']``: (h, w), min-max scaled."""
    kind, model, x, top = analysis_input(analysis)
    cls = top if target_class is None else int(target_class)
    layer = str(params.get("layer", DEFAULT_LAYER))

    def build() -> Tensor:
        return min_max_scale(ablation_cam(kind, model, x, layer, cls)[None])[0].float().cpu()

    return cached(analysis, ("ablationcam", cls, layer), build)
