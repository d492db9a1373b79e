"""An MViTv2's own arrays of the explain .npz, beside the shared keys.

``attention_<stage>_<block>`` (0-based, block within its stage): (heads, P + Nq, P + Nk)
float32, the CLS first (a model with one), then the query grid (``stage_grids``) and the key
grid (``key_grids``) row-major; ``stage_grids`` (S, 2); ``key_grids`` (L, 2); ``block_stage``
(L,); ``num_prefix_tokens``; ``logits``, ``probs``, ``target_class``.
"""

from __future__ import annotations

import numpy as np

from vitviz.kinds.mvit.analysis import MViTAnalysis


def mvit_arrays(analysis: MViTAnalysis) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    counts: dict[int, int] = {}
    for attn, stage in zip(analysis.attentions, analysis.block_stages, strict=True):
        j = counts.get(stage, 0)
        counts[stage] = j + 1
        out[f"attention_{stage}_{j}"] = attn.detach().float().cpu().numpy()
    out["stage_grids"] = np.asarray(analysis.stage_grids, dtype=np.int32).reshape(-1, 2)
    out["key_grids"] = np.asarray(analysis.key_grids, dtype=np.int32).reshape(-1, 2)
    out["block_stage"] = np.asarray(analysis.block_stages, dtype=np.int32)
    out["num_prefix_tokens"] = np.asarray(analysis.num_prefix_tokens, dtype=np.int32)
    out["logits"] = analysis.logits.detach().float().cpu().numpy()
    out["probs"] = analysis.probs.detach().float().cpu().numpy()
    out["target_class"] = np.asarray(analysis.target_class, dtype=np.int64)
    return out
