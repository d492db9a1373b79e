"""Dataset-mean ablation's values for a folder (DESIGN §5, "Interventions"): each head's mean
output over the folder's images and their tokens, computed once per model and folder and kept
(in memory) while the model lives and the folder's images are unchanged."""

from __future__ import annotations

import os
import weakref
from pathlib import Path
from typing import Any

from torch import nn

from vitviz.core.errors import VitvizError
from vitviz.imaging.loading import list_images
from vitviz.pipeline.interventions import DatasetMean, InterventionError, dataset_mean

_CACHE: weakref.WeakKeyDictionary[nn.Module, dict[tuple, DatasetMean]] = weakref.WeakKeyDictionary()


def _signature(images: list[Path]) -> tuple:
    """What changes when an image of the folder does: names, sizes and modification times."""
    out = []
    for path in images:
        st = os.stat(path)
        out.append((path.name, st.st_size, st.st_mtime_ns))
    return tuple(out)


def folder_mean(loaded: Any, folder: str | os.PathLike[str]) -> DatasetMean:
    """``DatasetMean`` of ``loaded``'s model over the images directly in ``folder``, each
    prepared as the kind's analysis prepares it; the same model and unchanged folder again: the
    kept one. InterventionError (one line) for a folder without an image that opens."""
    images = list_images(folder)
    key = (str(Path(folder).resolve()), _signature(images))
    kept = _CACHE.setdefault(loaded.model, {})
    if key in kept:
        return kept[key]
    inputs = []
    for path in images:
        try:
            inputs.append(loaded.kind.analyze(loaded, path).input)
        except (VitvizError, ValueError):
            continue  # an image that does not open is no part of the mean
    if not inputs:
        raise InterventionError(f"{folder}: no image in it opens, so it has no mean")
    mean = kept[key] = dataset_mean(loaded.kind, loaded.model, inputs)
    return mean
