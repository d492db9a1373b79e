"""A CaiT's head statistics, layer by layer, as they mean something: the class-attention
layout's (``vitviz.kinds.class_attention_methods.class_layer_statistics`` says what each is in a
self-attention and in a class-attention layer).
"""

from __future__ import annotations

from vitviz.kinds.class_attention_methods import class_layer_statistics

__all__ = ["class_layer_statistics"]
