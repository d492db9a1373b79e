"""The ViT's versions of the method table's entries (DESIGN §5): one compute function each,
declared once in ``METHODS`` (the ViT takes every parameter of each entry and can run every
method: ``CANNOT`` is empty; ``random`` is the table's own, kind-independent version).

A compute function takes (analysis, query, target_class, params) and returns a (gh, gw) float32
map over the patch grid, scaled as its table entry's ``scaling`` says. ``query`` is a (row, col)
patch or None for CLS (the mean of the patch queries on a model without prefix tokens);
``target_class`` None means the top prediction.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor, nn

from vitviz.explain.attribution import AttributionResult, attention_relevance, attribution_map
from vitviz.explain.gradcam import attention_gradcam, gradcam_method
from vitviz.explain.maps import attention_maps
from vitviz.explain.subject import Explained
from vitviz.explain.tokens import min_max_scale
from vitviz.kindapi.protocol import KindMethod

Query = tuple[int, int] | None

_CACHE_ATTR = "_explain_cache"
_CACHE_SIZE = 4


def cached_result(analysis: Explained, key: tuple, build: Callable[[], Any]) -> Any:
    """Per-analysis results that don't depend on the query (e.g. LRP per class), a few kept."""
    cache: dict[tuple, Any] = vars(analysis).setdefault(_CACHE_ATTR, {})
    if key not in cache:
        if len(cache) >= _CACHE_SIZE:
            cache.pop(next(iter(cache)))
        cache[key] = build()
    return cache[key]


def target_class(analysis: Explained, chosen: int | None) -> int:
    """The class a method explains: ``chosen``, or the top prediction for None."""
    return analysis.top_class if chosen is None else int(chosen)


def model_input(analysis: Explained) -> tuple[nn.Module, Tensor]:
    """The analysis's model and its input (1, C, H, W) on the model's device and dtype."""
    assert analysis.loaded is not None
    model = analysis.loaded.model
    p = next(model.parameters())
    return model, analysis.input[None].to(p.device, p.dtype)


def _head_index(value: int, maps: Tensor) -> Tensor:
    """(H, gh, gw) -> the head's map, or the mean over heads for -1."""
    return maps.mean(dim=0) if value == -1 else maps[value]


def _attention(a: Explained, q: Query, c: int | None, p: Mapping[str, Any]) -> Tensor:
    return _head_index(p["head"], a.attention_maps(p["layer"], q))


def _rollout(a: Explained, q: Query, c: int | None, p: Mapping[str, Any]) -> Tensor:
    return a.rollout(q, p["fusion"], None, p["discard_ratio"], p["start_layer"])


def _gradient_rollout(a: Explained, q: Query, c: int | None, p: Mapping[str, Any]) -> Tensor:
    return a.gradient_rollout(c, q, p["discard_ratio"], p["start_layer"])


def _relevance(a: Explained, q: Query, c: int | None, p: Mapping[str, Any]) -> Tensor:
    return a.relevance(c, q, p["start_layer"])


def _dino_masks(a: Explained, q: Query, c: int | None, p: Mapping[str, Any]) -> Tensor:
    masks = a.dino_masks(p["layer"], p["threshold"], q).to(torch.float32)  # (H, gh, gw)
    return _head_index(p["head"], masks)


def _transformer_attribution(a: Explained, q: Query, c: int | None, p: Mapping[str, Any]) -> Tensor:
    cls = target_class(a, c)

    def build() -> AttributionResult:
        model, x = model_input(a)
        return attention_relevance(model, x, cls)

    res = cached_result(a, ("transformer-attribution", cls), build)
    return attribution_map(res, q, p["start_layer"])[0]


def _grad_sam(a: Explained, q: Query, c: int | None, p: Mapping[str, Any]) -> Tensor:
    # mean_{l,h}(G⁺ ⊙ A) was summed in the gradient pass: the query's row of it
    total = a.gradient_products(c).grad_sam[:, None]  # (1, 1, N, N)
    rows = attention_maps(total, a.grid, a.num_prefix_tokens, a.query_token(q))[:, 0]
    return min_max_scale(rows)[0]


def _attention_gradcam(a: Explained, q: Query, c: int | None, p: Mapping[str, Any]) -> Tensor:
    g = a.gradient_products(c).last  # (1, H, N, N)
    attn = a.attention[-1].to(torch.float32)[None]
    return attention_gradcam(attn, g, a.grid, a.num_prefix_tokens, a.query_token(q))[0]


def _gradcam(a: Explained, q: Query, c: int | None, p: Mapping[str, Any]) -> Tensor:
    return gradcam_method(a, q, c, p)  # the table's, on its layer (DESIGN §5)


def _own_vit(reads: str) -> Callable[[str, nn.Module], str | None]:
    """A version that reads vitviz's own ViT modules: refuses a model from the user's code."""

    def requires(label: str, model: nn.Module) -> str | None:
        from vitviz.blocks import VisionTransformer

        if isinstance(model, VisionTransformer):
            return None
        return f"{label} needs vitviz's own ViT ({reads}), and this model comes from your code"

    return requires


def _lrp_rules(label: str, model: nn.Module) -> str | None:
    """Transformer attribution: vitviz's own ViT (every part of it has its rule)."""
    return _own_vit("its blocks' LRP rules and its head")(label, model)


def _gradcam_features(label: str, model: nn.Module) -> str | None:
    """Grad-CAM on a layer's tokens reads vitviz's own ViT's blocks: ``auto`` the last block's
    norm1 where it is a pre-norm, else its output (a post-norm block's norm1 follows the
    attention, a block of several branches has one per branch; DESIGN §5)."""
    return _own_vit("its blocks' norms and outputs")(label, model)


# The ViT kind's one declaration (DESIGN §5): its versions of the table's methods.
METHODS: dict[str, KindMethod] = {
    "attention": KindMethod(_attention),
    "rollout": KindMethod(_rollout),
    "gradient-rollout": KindMethod(_gradient_rollout),
    "relevance": KindMethod(_relevance),
    "dino-masks": KindMethod(_dino_masks),
    "transformer-attribution": KindMethod(_transformer_attribution, requires=_lrp_rules),
    "grad-sam": KindMethod(_grad_sam),
    "attention-gradcam": KindMethod(_attention_gradcam),
    "gradcam": KindMethod(_gradcam, requires=_gradcam_features),
}
# ... and what it can't run (with why): nothing
CANNOT: dict[str, str] = {}
