"""A CrossViT's own arrays of the explain .npz, beside the shared keys.

``attention_<i>`` per attention layer (0-based, in the head grid's order): a ViT block's
(heads, 1 + N_b, 1 + N_b), a cross-attention layer's (heads, 1, 1 + N_o), float32, the CLS
first, then the key branch's grid row-major; ``branch_grids`` (2, 2); ``layer_branch`` (L,) the
branch of each layer's keys; ``layer_cross`` (L,) 1 for a cross-attention layer; ``logits``,
``probs``, ``target_class``.
"""

from __future__ import annotations

import numpy as np

from vitviz.kinds.crossvit.analysis import CrossViTAnalysis
from vitviz.kinds.staged_export import int_pairs, per_layer_attentions, prediction_arrays


def crossvit_arrays(analysis: CrossViTAnalysis) -> dict[str, np.ndarray]:
    out = per_layer_attentions(analysis.attentions)
    out["branch_grids"] = int_pairs(analysis.stage_grids)
    out["layer_branch"] = np.asarray(analysis.block_stages, dtype=np.int32)
    out["layer_cross"] = np.asarray([k == "cross" for k in analysis.layer_kinds], dtype=np.int32)
    return out | prediction_arrays(analysis)
