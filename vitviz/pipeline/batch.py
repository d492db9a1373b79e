"""Many images through one model of any kind: one ``BatchItem`` per image, in order (DESIGN §7).

A kind that takes a batch size runs its own batches (``ModelKind.analyze_images``: the ViT's
``vitviz.kinds.vit.batch``); any other is analysed one image at a time through its ``analyze``.
An image that can't be read or analysed is yielded with its error; the others go on.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from vitviz.checkpoints import LoadedModel
from vitviz.core.errors import VitvizError
from vitviz.imaging import Preprocessing
from vitviz.kindapi import KindAnalysis


@dataclass
class BatchItem:
    """One image's outcome: its Analysis, or the error that stopped it (a VitvizError)."""

    index: int  # position in the images given
    image: Any
    analysis: KindAnalysis | None  # an Analysis from iter_analyses
    error: VitvizError | None = None


def iter_kind_analyses(
    loaded: LoadedModel,
    images: Sequence[Any],
    *,
    batch_size: int | None = None,
    device: str | torch.device | None = None,
    preprocessing: Preprocessing | None = None,
    gradients: bool = False,
    **batch_options: Any,
) -> Iterator[BatchItem]:
    """One BatchItem per image, in order, for a model of any kind: ``iter_analyses`` (batches,
    ``batch_options`` its other arguments) where the model's kind takes a batch size, else one
    image at a time through the kind's ``analyze``, on ``device`` with ``preprocessing``."""
    from dataclasses import replace

    from vitviz.core.devices import resolve_device

    kind = loaded.kind  # carried from where the model was opened (DESIGN §3)
    dev = None if device is None else resolve_device(device)  # either way: resolved once
    if "batch_size" not in kind.unused_options():
        yield from kind.analyze_images(
            loaded,
            images,
            batch_size=batch_size,
            device=dev,
            preprocessing=preprocessing,
            gradients=gradients,
            **batch_options,
        )
        return
    if preprocessing is not None:
        loaded = replace(loaded, preprocessing=preprocessing)
    if dev is not None:
        loaded.model.to(dev)
    for index, image in enumerate(images):
        try:
            analysis = kind.analyze(loaded, image, gradients=gradients)
        except (VitvizError, ValueError) as exc:
            error = exc if isinstance(exc, VitvizError) else VitvizError(str(exc))
            yield BatchItem(index, image, None, error)
            continue
        yield BatchItem(index, image, analysis)
