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


def attention_key(stage: int, block: int) -> str:
    return f"attention_{stage}_{block}"


def pyramid_arrays(analysis: PyramidAnalysis) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    counts: dict[int, int] = {}
    for attn, stage in zip(analysis.attentions, analysis.block_stages, strict=True):
        j = counts.get(stage, 0)
        counts[stage] = j + 1
        out[attention_key(stage, j)] = attn.detach().float().cpu().numpy()
    out["stage_grids"] = np.asarray(analysis.stage_grids, dtype=np.int32).reshape(-1, 2)
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
    out["logits"] = analysis.logits.detach().float().cpu().numpy()
    out["probs"] = analysis.probs.detach().float().cpu().numpy()
    out["target_class"] = np.asarray(analysis.target_class, dtype=np.int64)
    return out
