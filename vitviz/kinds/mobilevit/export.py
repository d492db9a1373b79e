"""A MobileViT's own arrays of the explain .npz, beside the shared keys.

``attention_<stage>_<layer>`` (0-based: the MobileViT block, the layer within it): (heads, P,
N, N) float32, P the pixel offsets of a p × p patch (oy·p + ox), N the patches row-major;
``stage_grids`` (S, 2) feature pixels, ``patch_grids`` (S, 2); ``block_stage`` (L,); ``patch``;
``logits``, ``probs``, ``target_class``.
"""

from __future__ import annotations

import numpy as np

from vitviz.kinds.mobilevit.analysis import MobileViTAnalysis
from vitviz.kinds.staged_export import int_pairs, per_stage_attentions, prediction_arrays


def mobilevit_arrays(analysis: MobileViTAnalysis) -> dict[str, np.ndarray]:
    out = per_stage_attentions(analysis.attentions, analysis.block_stages)
    out["stage_grids"] = int_pairs(analysis.stage_grids)
    out["patch_grids"] = int_pairs(analysis.patch_grids)
    out["block_stage"] = np.asarray(analysis.block_stages, dtype=np.int32)
    out["patch"] = np.asarray(analysis.patch, dtype=np.int32)
    return out | prediction_arrays(analysis)
