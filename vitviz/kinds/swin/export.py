"""The numbers of a Swin analysis as named arrays, for an .npz export.

``window_attention_<stage>_<block>`` (0-based, block within its stage): (windows, heads, n, n) in
the order the model partitions its padded, cyclically shifted map; ``stage_grids`` (S, 2);
per block ``block_stage`` (L,), ``grid``, ``padded``, ``window_size`` and ``shift`` (L, 2) and
``shift_first`` (L,); ``logits``, ``probs``, ``target_class``. The caller adds what it knows
(``class_names``, ``input``).
"""

from __future__ import annotations

import numpy as np

from vitviz.kinds.staged_export import int_pairs, per_stage_attentions, prediction_arrays
from vitviz.kinds.swin.analysis import SwinAnalysis


def attention_key(stage: int, block: int) -> str:
    return f"window_attention_{stage}_{block}"


def swin_arrays(analysis: SwinAnalysis) -> dict[str, np.ndarray]:
    """Every array named as above (float32 attention, int32 geometry)."""
    out = per_stage_attentions(analysis.attentions, analysis.block_stages, attention_key)
    layouts = analysis.layouts
    out["stage_grids"] = int_pairs(list(analysis.stage_grids))
    out["block_stage"] = np.asarray(analysis.block_stages, dtype=np.int32)
    out["grid"] = int_pairs([lay.grid for lay in layouts])
    out["padded"] = int_pairs([lay.padded for lay in layouts])
    out["window_size"] = int_pairs([lay.window for lay in layouts])
    out["shift"] = int_pairs([lay.shift for lay in layouts])
    out["shift_first"] = np.asarray([lay.shift_first for lay in layouts], dtype=bool)
    return out | prediction_arrays(analysis)
