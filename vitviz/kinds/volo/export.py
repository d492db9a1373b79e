"""A VOLO's own arrays of the explain .npz, beside the shared keys.

``attention_<i>`` per attention layer (0-based, in the head grid's order), float32: an
outlooker's weights (heads, windows, k², k²) (rows a window's output cells, columns its input
cells, row-major in the neighbourhood), a transformer block's (heads, N, N) on the half grid, a
class block's (heads, 1, 1 + N) (the CLS first); ``window_cells`` (windows, k²) the stage-0 cell
under each window position (H·W: the padding); ``stage_grids`` (2, 2); ``layer_grid`` (L,) each
layer's grid; ``layer_kind`` (L,) 0 outlook, 1 self, 2 class; ``logits``, ``probs``,
``target_class``.
"""

from __future__ import annotations

import numpy as np

from vitviz.kinds.staged_export import int_pairs, per_layer_attentions, prediction_arrays
from vitviz.kinds.volo.analysis import VOLOAnalysis

KINDS = ("outlook", "self", "class")


def volo_arrays(analysis: VOLOAnalysis) -> dict[str, np.ndarray]:
    out = per_layer_attentions(analysis.attentions)
    out["window_cells"] = analysis.window_cells.cpu().numpy().astype(np.int64)
    out["stage_grids"] = int_pairs(analysis.stage_grids)
    out["layer_grid"] = np.asarray(analysis.block_stages, dtype=np.int32)
    out["layer_kind"] = np.asarray([KINDS.index(k) for k in analysis.layer_kinds], dtype=np.int32)
    return out | prediction_arrays(analysis)
