"""A pyramid ViT's own arrays of the explain .npz, beside the shared keys.

``attention_<stage>_<block>`` (0-based, block within its stage): (heads, N_s, M_b) float32,
rows the stage's tokens row-major, columns the block's reduced keys row-major; ``stage_grids``
(S, 2); per block ``block_stage`` (L,), ``key_grid`` (L, 2) and ``sr_ratio`` (L,) (0 for a
linear block's pooled keys and for a Hiera's, whose keys are the block's input tokens);
``logits``, ``probs``, ``target_class``; ``block_prefix`` (L,): a block's CLS tokens, first in
its rows and columns (a PVT v1's last stage: 1).
"""

from __future__ import annotations

import numpy as np

from vitviz.kinds.pyramid.analysis import PyramidAnalysis
from vitviz.kinds.staged_export import int_pairs, per_stage_attentions, prediction_arrays


def pyramid_arrays(analysis: PyramidAnalysis) -> dict[str, np.ndarray]:
    out = per_stage_attentions(analysis.attentions, analysis.block_stages)
    out["stage_grids"] = int_pairs(analysis.stage_grids)
    out["block_stage"] = np.asarray(analysis.block_stages, dtype=np.int32)
    out["key_grid"] = np.asarray([k.coarse for k in analysis.keys], dtype=np.int32).reshape(-1, 2)
    model = getattr(analysis.loaded, "model", None)
    cfg = getattr(model, "config", None)
    srs = [
        0 if cfg is None or getattr(cfg, "linear", True) else cfg.sr_ratios[s]
        for s in analysis.block_stages
    ]  # a Hiera (no key reduction): 0
    out["sr_ratio"] = np.asarray(srs, dtype=np.int32)
    L = len(analysis.attentions)
    out["block_prefix"] = np.asarray([analysis.prefix_of(b) for b in range(L)], dtype=np.int32)
    return out | prediction_arrays(analysis)
