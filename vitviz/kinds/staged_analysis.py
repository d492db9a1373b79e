"""What the staged kinds' analyses share (a Swin's, a pyramid ViT's; DESIGN §3): the
predictions read from their logits and the checkpoint's class names (``StagedAnalysisBase``),
and per-block head values padded to one (layers, most heads) array (``padded``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from torch import Tensor


class StagedAnalysisBase:
    """Mixin of an analysis dataclass with ``logits`` (classes,) and ``loaded``."""

    logits: Tensor
    loaded: Any
    kept_blocks: Any = None  # the BlockOutputs its own pass kept (StagedKind.keeping_blocks)

    @property
    def top_class(self) -> int:
        """The top prediction (-1 without a head)."""
        return int(self.logits.argmax()) if self.logits.numel() else -1

    @property
    def has_head(self) -> bool:
        return self.logits.numel() > 0

    @property
    def class_names(self) -> list[str]:
        """The checkpoint's class names (empty for an analysis of a bare model)."""
        return list(getattr(self.loaded, "class_names", None) or [])


def padded(rows: Sequence[np.ndarray], heads: int) -> np.ndarray:
    """Per block (h_b,) values -> (L, heads) float32, NaN where a block has fewer heads."""
    out = np.full((len(rows), heads), np.nan, dtype=np.float32)
    for b, r in enumerate(rows):
        out[b, : r.shape[0]] = r
    return out
