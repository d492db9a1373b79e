"""A MobileViT's own arrays of the explain .npz, beside the shared keys.

``attention_<stage>_<layer>`` (0-based: the MobileViT block, the layer within it): (heads, P,
N, N) float32, P the pixel offsets of a p × p patch (oy·p + ox), N the patches row-major;
``stage_grids`` (S, 2) feature pixels, ``patch_grids`` (S, 2); ``block_stage`` (L,); ``patch``;
``logits``, ``probs``, ``target_class``.
"""

from __future__ import annotations

import numpy as np

from vitviz.kinds.mobilevit.analysis import MobileViTAnalysis


def mobilevit_arrays(analysis: MobileViTAnalysis) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    counts: dict[int, int] = {}
    for attn, stage in zip(analysis.attentions, analysis.block_stages, strict=True):
        j = counts.get(stage, 0)
        counts[stage] = j + 1
        out[f"attention_{stage}_{j}"] = attn.detach().float().cpu().numpy()
    out["stage_grids"] = np.asarray(analysis.stage_grids, dtype=np.int32).reshape(-1, 2)
    out["patch_grids"] = np.asarray(analysis.patch_grids, dtype=np.int32).reshape(-1, 2)
    out["block_stage"] = np.asarray(analysis.block_stages, dtype=np.int32)
    out["patch"] = np.asarray(analysis.patch, dtype=np.int32)
    out["logits"] = analysis.logits.detach().float().cpu().numpy()
    out["probs"] = analysis.probs.detach().float().cpu().numpy()
    out["target_class"] = np.asarray(analysis.target_class, dtype=np.int64)
    return out
