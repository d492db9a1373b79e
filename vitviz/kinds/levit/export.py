"""A LeViT's own arrays of the explain .npz, beside the shared keys.

``attention_<stage>_<layer>`` (0-based, layer within its stage, a stage's subsample first):
(heads, N_q, N_k) float32, queries on the stage's grid row-major, keys on the keys' grid
(a subsample's: the stage before's); ``stage_grids`` (S, 2); ``block_stage`` and ``key_stage``
(L,); ``logits``, ``probs``, ``target_class``.
"""

from __future__ import annotations

import numpy as np

from vitviz.kinds.levit.analysis import LeViTAnalysis


def levit_arrays(analysis: LeViTAnalysis) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    counts: dict[int, int] = {}
    for attn, stage in zip(analysis.attentions, analysis.block_stages, strict=True):
        j = counts.get(stage, 0)
        counts[stage] = j + 1
        out[f"attention_{stage}_{j}"] = attn.detach().float().cpu().numpy()
    out["stage_grids"] = np.asarray(analysis.stage_grids, dtype=np.int32).reshape(-1, 2)
    out["block_stage"] = np.asarray(analysis.block_stages, dtype=np.int32)
    out["key_stage"] = np.asarray(analysis.key_stages, dtype=np.int32)
    out["logits"] = analysis.logits.detach().float().cpu().numpy()
    out["probs"] = analysis.probs.detach().float().cpu().numpy()
    out["target_class"] = np.asarray(analysis.target_class, dtype=np.int64)
    return out
