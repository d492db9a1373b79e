"""The XCiT's own version of a method-table entry: transformer attribution on its
class-attention layers (``vitviz.kinds.xcit.attribution``); the other methods are the
class-attention layout's (``vitviz.kinds.class_attention_methods``), with no self-attention
layer.

A patch query is refused as the XCiT's rollouts and relevance refuse it: no layer has a patch
row (only the CLS queries, in the class-attention blocks).
"""

from __future__ import annotations

from vitviz.kindapi.protocol import KindMethod
from vitviz.kinds.class_attention_methods import CANNOT as CLASS_ATTENTION_CANNOT
from vitviz.kinds.class_attention_methods import METHODS as CLASS_ATTENTION_METHODS
from vitviz.kinds.class_attention_methods import transformer_attribution
from vitviz.kinds.xcit.attribution import xcit_attention_relevance

# The XCiT kind's one declaration (DESIGN §5): the layout's versions and its own LRP ...
METHODS: dict[str, KindMethod] = {
    **CLASS_ATTENTION_METHODS,
    "transformer-attribution": transformer_attribution(xcit_attention_relevance),
}
# ... and what it can't run, with why: what the layout can't
CANNOT: dict[str, str] = dict(CLASS_ATTENTION_CANNOT)
