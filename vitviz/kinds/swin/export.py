"""The numbers of a Swin analysis as named arrays, for an .npz export.

``window_attention_<stage>_<block>`` (0-based, block within its stage): (windows, heads, n, n) in
the order the model partitions its padded, cyclically shifted map; ``stage_grids`` (S, 2);
per block ``block_stage`` (L,), ``grid``, ``padded``, ``window_size`` and ``shift`` (L, 2) and
``shift_first`` (L,); ``logits``, ``probs``, ``target_class``. The caller adds what it knows
(``class_names``, ``input``).
"""

from __future__ import annotations

import numpy as np

from vitviz.kinds.swin.analysis import SwinAnalysis


def attention_key(stage: int, block: int) -> str:
    return f"window_attention_{stage}_{block}"


def swin_arrays(analysis: SwinAnalysis) -> dict[str, np.ndarray]:
    """Every array named as above (float32 attention, int32 geometry)."""
    out: dict[str, np.ndarray] = {}
    counts: dict[int, int] = {}
    for attn, stage in zip(analysis.attentions, analysis.block_stages, strict=True):
        j = counts.get(stage, 0)
        counts[stage] = j + 1
        out[attention_key(stage, j)] = attn.detach().cpu().numpy().astype(np.float32)
    layouts = analysis.layouts

    def pairs(values: list[tuple[int, int]]) -> np.ndarray:
        return np.asarray(values, dtype=np.int32).reshape(-1, 2)

    out["stage_grids"] = pairs(list(analysis.stage_grids))
    out["block_stage"] = np.asarray(analysis.block_stages, dtype=np.int32)
    out["grid"] = pairs([lay.grid for lay in layouts])
    out["padded"] = pairs([lay.padded for lay in layouts])
    out["window_size"] = pairs([lay.window for lay in layouts])
    out["shift"] = pairs([lay.shift for lay in layouts])
    out["shift_first"] = np.asarray([lay.shift_first for lay in layouts], dtype=bool)
    out["logits"] = analysis.logits.detach().cpu().numpy().astype(np.float32)
    out["probs"] = analysis.probs.detach().cpu().numpy().astype(np.float32)
    out["target_class"] = np.asarray(analysis.target_class, dtype=np.int64)
    return out
