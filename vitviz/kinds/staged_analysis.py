"""What the staged kinds' analyses share (a Swin's, a pyramid ViT's, a PiT's; DESIGN §3): the
predictions read from their logits and the checkpoint's class names (``StagedAnalysisBase``),
the ``loaded`` of a bare model (``ModelOnly``), the image decoded and prepared as ``analyze``
does it (``decode_for_model``), and per-block head values padded to one (layers, most heads)
array (``padded``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from torch import Tensor, nn


@dataclass(frozen=True)
class ModelOnly:
    """What an analysis of a bare model (no checkpoint) holds as its ``loaded``: the model,
    so the methods that run it (gradients, Grad-CAM) can; no class names."""

    model: nn.Module
    class_names: tuple[str, ...] = ()


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


def decode_for_model(image: Any, prep: Any, patch: int) -> tuple[Any, Any]:
    """The source decoded as ``analyze`` decodes it and the model input prepared from it."""
    from vitviz.imaging import load_image, prepare_image
    from vitviz.imaging.loading import full_size
    from vitviz.imaging.preprocess import source_for_display
    from vitviz.imaging.reduction import OVERLAY_MAX_SIDE, model_min_size

    source = load_image(image, max_side=OVERLAY_MAX_SIDE, min_size=model_min_size(prep, patch))
    source = source_for_display(source, prep.channels)
    return source, prepare_image(source, prep, patch, full_size=full_size(source))
