"""A LeViT's own arrays of the explain .npz, beside the shared keys.

``attention_<stage>_<layer>`` (0-based, layer within its stage, a stage's subsample first):
(heads, N_q, N_k) float32, queries on the stage's grid row-major, keys on the keys' grid
(a subsample's: the stage before's); ``stage_grids`` (S, 2); ``block_stage`` and ``key_stage``
(L,); ``logits``, ``probs``, ``target_class``.
"""

from __future__ import annotations

import numpy as np

from vitviz.kinds.levit.analysis import LeViTAnalysis
from vitviz.kinds.staged_export import int_pairs, per_stage_attentions, prediction_arrays


def levit_arrays(analysis: LeViTAnalysis) -> dict[str, np.ndarray]:
    out = per_stage_attentions(analysis.attentions, analysis.block_stages)
    out["stage_grids"] = int_pairs(analysis.stage_grids)
    out["block_stage"] = np.asarray(analysis.block_stages, dtype=np.int32)
    out["key_stage"] = np.asarray(analysis.key_stages, dtype=np.int32)
    return out | prediction_arrays(analysis)
