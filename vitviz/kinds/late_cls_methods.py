"""What the late-CLS kinds' method versions share (CaiT, XCiT, ConViT; DESIGN §5): a
one-layer method of the ViT's table run only where the query has a row in that layer (the CLS
joins after the first layers, and in class-attention layers only the CLS queries)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from torch import Tensor

from vitviz.explain.subject import Explained

Query = tuple[int, int] | None


def one_layer_method(
    own: Callable[[Explained, Query, int | None, Mapping[str, Any]], Tensor],
    layers: Callable[[Explained], tuple[int, int]],
    problem: Callable[[int, int, int, Query], str | None],
    fixed_layer: int | None = None,
) -> Callable[[Explained, Query, int | None, Mapping[str, Any]], Tensor]:
    """``own`` (analysis, query, class, params) -> map of the layer ``params["layer"]`` (or
    ``fixed_layer``), refusing in one line (ValueError) what ``problem(first, depth, layer,
    query)`` says, ``layers(analysis)`` = (the layers before the CLS joins, all layers)."""

    def compute(a: Explained, q: Query, c: int | None, p: Mapping[str, Any]) -> Tensor:
        first, depth = layers(a)
        layer = fixed_layer if fixed_layer is not None else int(p["layer"])
        why = problem(first, depth, layer, q)
        if why is not None:
            raise ValueError(why)
        return own(a, q, c, p)

    return compute
