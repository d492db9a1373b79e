"""The arrays the staged kinds' explain .npz share (DESIGN §5): attention numbered per stage
(``attention_<stage>_<block>``) or per layer (``attention_<layer>``), float32, and the
predictions (``logits``, ``probs`` (C,) float32, ``target_class`` int64)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from torch import Tensor


def stage_key(stage: int, block: int) -> str:
    """The key of the ``block``-th attention (0-based) of ``stage``."""
    return f"attention_{stage}_{block}"


def per_stage_attentions(
    attentions: Sequence[Tensor],
    block_stages: Sequence[int],
    key: Callable[[int, int], str] = stage_key,
) -> dict[str, np.ndarray]:
    """Each attention (heads, ...) as float32 under ``key(stage, block within its stage)``."""
    out: dict[str, np.ndarray] = {}
    counts: dict[int, int] = {}
    for attn, stage in zip(attentions, block_stages, strict=True):
        j = counts.get(stage, 0)
        counts[stage] = j + 1
        out[key(stage, j)] = attn.detach().float().cpu().numpy()
    return out


def per_layer_attentions(attentions: Sequence[Tensor]) -> dict[str, np.ndarray]:
    """Each attention (heads, ...) as float32 under ``attention_<layer>``."""
    return {f"attention_{i}": a.detach().float().cpu().numpy() for i, a in enumerate(attentions)}


def int_pairs(values: Any) -> np.ndarray:
    """(h, w) pairs -> (n, 2) int32."""
    return np.asarray(values, dtype=np.int32).reshape(-1, 2)


def prediction_arrays(analysis: Any) -> dict[str, np.ndarray]:
    """``logits`` and ``probs`` (C,) float32 and ``target_class`` of an analysis."""
    return {
        "logits": analysis.logits.detach().float().cpu().numpy(),
        "probs": analysis.probs.detach().float().cpu().numpy(),
        "target_class": np.asarray(analysis.target_class, dtype=np.int64),
    }
