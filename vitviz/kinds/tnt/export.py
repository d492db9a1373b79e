"""A TNT's own arrays of the explain .npz, beside the shared keys.

``attention_<block>`` (0-based): (heads, 1 + N, 1 + N) float32, the block's outer attention,
the CLS first, then the patch grid row-major; ``grid`` (2,); ``pixel_grid`` (2,) (a patch's
pixel tokens, whose inner attention is not exported); ``logits``, ``probs``, ``target_class``.
"""

from __future__ import annotations

import numpy as np

from vitviz.kinds.staged_export import per_layer_attentions, prediction_arrays
from vitviz.kinds.tnt.analysis import TNTAnalysis


def tnt_arrays(analysis: TNTAnalysis) -> dict[str, np.ndarray]:
    out = per_layer_attentions(analysis.attentions)
    out["grid"] = np.asarray(analysis.stage_grids[0], dtype=np.int32)
    out["pixel_grid"] = np.asarray(analysis.pixel_grid, dtype=np.int32)
    return out | prediction_arrays(analysis)
