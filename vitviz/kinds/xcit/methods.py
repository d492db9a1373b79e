"""The XCiT's own version of a method-table entry: transformer attribution on its
class-attention layers (``vitviz.kinds.xcit.attribution``); the other methods are the CaiT
kind's (``vitviz.kinds.cait.methods``), with no self-attention layer.

A patch query is refused as the XCiT's rollouts and relevance refuse it: no layer has a patch
row (only the CLS queries, in the class-attention blocks).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import Tensor

from vitviz.explain.attribution import AttributionResult, attribution_map
from vitviz.explain.subject import Explained
from vitviz.kindapi.protocol import KindMethod
from vitviz.kinds.cait.methods import CANNOT as CAIT_CANNOT
from vitviz.kinds.cait.methods import METHODS as CAIT_METHODS
from vitviz.kinds.cait.methods import require_patch_queries
from vitviz.kinds.vit.methods import cached_result, model_input, target_class
from vitviz.kinds.xcit.attribution import xcit_attention_relevance

Query = tuple[int, int] | None


def _transformer_attribution(a: Explained, q: Query, c: int | None, p: Mapping[str, Any]) -> Tensor:
    """(gh, gw): the CLS's row of the class-attention layers' chain with R_A for A."""
    require_patch_queries(a, q)
    cls = target_class(a, c)

    def build() -> AttributionResult:
        model, x = model_input(a)
        return xcit_attention_relevance(model, x, cls)

    res = cached_result(a, ("transformer-attribution", cls), build)
    return attribution_map(res, q, p["start_layer"])[0]


# The XCiT kind's one declaration (DESIGN §5): the CaiT's versions, its own LRP ...
METHODS: dict[str, KindMethod] = {
    **CAIT_METHODS,
    "transformer-attribution": KindMethod(_transformer_attribution),
}
# ... and what it can't run, with why: what the CaiT can't
CANNOT: dict[str, str] = dict(CAIT_CANNOT)
