"""An MViTv2's own arrays of the explain .npz, beside the shared keys.

``attention_<stage>_<block>`` (0-based, block within its stage): (heads, P + Nq, P + Nk)
float32, the CLS first (a model with one), then the query grid (``stage_grids``) and the key
grid (``key_grids``) row-major; ``stage_grids`` (S, 2); ``key_grids`` (L, 2); ``block_stage``
(L,); ``num_prefix_tokens``; ``logits``, ``probs``, ``target_class``.
"""

from __future__ import annotations

import numpy as np

from vitviz.kinds.mvit.analysis import MViTAnalysis
from vitviz.kinds.staged_export import int_pairs, per_stage_attentions, prediction_arrays


def mvit_arrays(analysis: MViTAnalysis) -> dict[str, np.ndarray]:
    out = per_stage_attentions(analysis.attentions, analysis.block_stages)
    out["stage_grids"] = int_pairs(analysis.stage_grids)
    out["key_grids"] = int_pairs(analysis.key_grids)
    out["block_stage"] = np.asarray(analysis.block_stages, dtype=np.int32)
    out["num_prefix_tokens"] = np.asarray(analysis.num_prefix_tokens, dtype=np.int32)
    return out | prediction_arrays(analysis)
