"""The ``pca`` map fitted jointly over a run's images (DESIGN §5, DINOv2's figure): a first pass
through the model keeps each image's final-normed patch tokens (N_i × C, on the host), one PCA
is fitted over all of them, and each image's map is its rows of it, the colours of one fit.

The explain run then writes these maps as ``map_pca`` and ``<stem>_pca.png`` in place of each
image's own fit (``joined``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from vitviz.explain.feature_methods import final_patches
from vitviz.explain.features import pca_rgb

if TYPE_CHECKING:
    from vitviz.pipeline.batch import BatchItem
    from vitviz.pipeline.export import ExplainedMaps

JOINT_METHOD = "pca"  # the table method whose map a joint fit replaces


def fit_joint_pca(items: Iterable[BatchItem], foreground: float = 0.0) -> dict[int, np.ndarray]:
    """{image index: (h, w, 3) float32 colours} of one PCA over every analysed item's final
    patch tokens (items with an error have none); equal to
    ``vitviz.explain.feature_methods.joint_pca`` of the same analyses."""
    features, grids, indices = [], [], []
    for item in items:
        if item.analysis is None:
            continue
        tokens, grid = final_patches(item.analysis)
        features.append(tokens.detach().float().cpu())
        grids.append(grid)
        indices.append(item.index)
        del item, tokens  # only the tokens are kept, not the analysis
    if not features:
        return {}
    maps = pca_rgb(features, grids, foreground)
    return {i: m.numpy().astype(np.float32) for i, m in zip(indices, maps, strict=True)}


def joined(maps: ExplainedMaps, joint: dict[int, np.ndarray], index: int) -> ExplainedMaps:
    """``maps`` with the joint fit's colours of image ``index`` as its ``pca`` map (as they
    were where the run has no joint fit, or the image none)."""
    if index in joint and JOINT_METHOD in maps.methods:
        maps.methods[JOINT_METHOD] = joint[index]
    return maps
