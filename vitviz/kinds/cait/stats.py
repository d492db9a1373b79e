"""A CaiT's head statistics, layer by layer, as they mean something (DESIGN §5's are over the
patch queries):

- self-attention layers (patches only, talking heads): mean attention distance over the patch
  queries (the captured weights as they are); entropy NaN (a talking-heads matrix is no
  probability distribution: entries can be negative); prefix share NaN (no prefix token there);
- class-attention layers (only the CLS queries): distance NaN (the CLS has no position);
  entropy of the CLS's row over [CLS, patches] (nats); prefix share = the CLS's attention to
  itself.
"""

from __future__ import annotations

from vitviz.kinds.class_attention_methods import class_layer_statistics

__all__ = ["class_layer_statistics"]
