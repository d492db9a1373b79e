"""The versions of the method table's entries on a class-attention layout (every layer's
attention over [CLS, patches], the rows of tokens a layer does not update being the identity;
the first S layers self-attention over the patches, the others class attention), and their
head statistics. Each kind's ``methods`` module adds its own transformer attribution (its LRP)
to ``METHODS`` and states the definitions.

Head statistics (``class_layer_statistics``), layer by layer, as they mean something (DESIGN
§5's are over the patch queries):

- self-attention layers (patches only, talking heads): mean attention distance over the patch
  queries (the captured weights as they are); entropy NaN (a talking-heads matrix is no
  probability distribution: entries can be negative); prefix share NaN (no prefix token there);
- class-attention layers (only the CLS queries): distance NaN (the CLS has no position);
  entropy of the CLS's row over [CLS, patches] (nats); prefix share = the CLS's attention to
  itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from vitviz.explain.attribution import AttributionResult, attribution_map
from vitviz.explain.subject import Explained
from vitviz.kindapi.protocol import KindMethod
from vitviz.kinds.late_cls_methods import Query, one_layer_method
from vitviz.kinds.vit.methods import METHODS as VIT_METHODS
from vitviz.kinds.vit.methods import cached_result, model_input, target_class

NO_DISCARD = (
    "this model's layers are P × P (self-attention over the patches) and 1 × (1 + P) (the "
    "CLS's class attention), so DESIGN's one count of ⌊ratio·N²⌋ entries has no single meaning"
)


def class_layers(analysis: Explained) -> tuple[int, int]:
    """(self-attention layers S, model layers L) of the analysis's model."""
    assert analysis.loaded is not None
    cfg = analysis.loaded.model.config
    return int(cfg.self_depth), int(cfg.depth)


def query_problem(self_depth: int, depth: int, layer: int, query: Query) -> str | None:
    """Why ``query`` (None: the CLS) has no row in model layer ``layer`` (-1: the last), or
    None when it queries there."""
    layer = layer + depth if layer < 0 else layer
    if layer < self_depth and query is None:
        return (
            f"layer {layer} is a self-attention block over the patches: the CLS token "
            f"joins only at the class-attention blocks (layers {self_depth}-{depth - 1}); "
            "click a patch, or pick one of those layers"
        )
    if layer >= self_depth and query is not None:
        other = f", or a self-attention layer (0-{self_depth - 1})" if self_depth else ""
        return (
            f"layer {layer} is a class-attention block: only the CLS token queries there "
            f"(a patch takes nothing from other tokens there); use the CLS query{other}"
        )
    return None


def _one_layer(name: str, fixed_layer: int | None = None) -> Any:
    return one_layer_method(VIT_METHODS[name], class_layers, query_problem, fixed_layer)


def require_patch_queries(a: Explained, q: Query) -> None:
    """ValueError for a patch query on a model where no layer has a patch query (one with
    class-attention layers only): its chain would be the patch itself."""
    if q is not None and class_layers(a)[0] == 0:
        raise ValueError(
            "no layer of this model has a patch query (only the CLS queries, in the "
            "class-attention blocks); use the CLS query"
        )


def _rollout(a: Explained, q: Query, c: int | None, p: Mapping[str, Any]) -> Tensor:
    require_patch_queries(a, q)
    return a.rollout(q, p["fusion"], None, 0.0, p["start_layer"])


def _gradient_rollout(a: Explained, q: Query, c: int | None, p: Mapping[str, Any]) -> Tensor:
    require_patch_queries(a, q)
    return a.gradient_rollout(c, q, 0.0, p["start_layer"])


def _chained(name: str) -> Any:
    own = VIT_METHODS[name]

    def compute(a: Explained, q: Query, c: int | None, p: Mapping[str, Any]) -> Tensor:
        require_patch_queries(a, q)
        return own(a, q, c, p)

    return compute


def transformer_attribution(
    relevance: Callable[[nn.Module, Tensor, int], AttributionResult],
) -> KindMethod:
    """Transformer attribution (Chefer, Gur & Wolf 2021) with a kind's LRP: ``relevance(model,
    x, class)`` gives R_A^l and G_l in the captured layout; the map is the query's row of
    relevance's chain with R_A for A, over the patches."""

    def compute(a: Explained, q: Query, c: int | None, p: Mapping[str, Any]) -> Tensor:
        require_patch_queries(a, q)
        cls = target_class(a, c)

        def build() -> AttributionResult:
            model, x = model_input(a)
            return relevance(model, x, cls)

        res = cached_result(a, ("transformer-attribution", cls), build)
        return attribution_map(res, q, p["start_layer"])[0]

    return KindMethod(compute)


# Their versions of the table's methods, each taking every parameter of its entry but those it
# refuses (transformer attribution: each kind's own LRP) ...
METHODS: dict[str, KindMethod] = {
    "attention": KindMethod(_one_layer("attention")),
    "rollout": KindMethod(_rollout, refusals={"discard_ratio": NO_DISCARD}),
    "gradient-rollout": KindMethod(_gradient_rollout, refusals={"discard_ratio": NO_DISCARD}),
    "relevance": KindMethod(_chained("relevance")),
    "dino-masks": KindMethod(_one_layer("dino-masks")),
    "grad-sam": KindMethod(_chained("grad-sam")),
    "attention-gradcam": KindMethod(_one_layer("attention-gradcam", fixed_layer=-1)),
    "gradcam": KindMethod(VIT_METHODS["gradcam"].compute),  # the model's own last block
}
# ... and what they can't run, with why: nothing
CANNOT: dict[str, str] = {}


def class_layer_statistics(
    attention: Tensor,
    layers: Sequence[int],
    self_depth: int,
    distance: Tensor,
    entropy: Tensor,
    prefix: Tensor,
) -> tuple[Tensor, Tensor, Tensor]:
    """``attention`` (K, H, N, N) of model layers ``layers``; the (K, H) statistics as the ViT's
    analysis made them -> (distance, entropy, prefix share) (K, H) float32 as above."""
    distance, entropy, prefix = distance.clone(), entropy.clone(), prefix.clone()
    nan = float("nan")
    for row, layer in enumerate(layers):
        if layer < self_depth:
            entropy[row] = nan
            prefix[row] = nan
            continue
        cls = attention[row, :, 0, :].double()  # (H, N) the CLS's row
        tiny = torch.finfo(torch.float64).tiny
        entropy[row] = (-(cls * (cls + tiny).log()).sum(dim=-1)).to(entropy).cpu()
        prefix[row] = cls[:, 0].to(prefix).cpu()
        distance[row] = nan
    return distance, entropy, prefix
