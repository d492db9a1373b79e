"""The module fixtures the shared feature and intervention tests (test_features_kinds,
test_interventions_kinds) take beside each kind's own ``loaded``: ``opened``, the opened model
with one fixed random input (C, H, W), and ``analysis``, the kind's analysis of one fixed random
(H, W, 3) image. A kind's generic test module makes them for its own image size:

    opened, analysis = input_fixtures(SIZE)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from vitviz.pipeline.analysis import analyze


def input_fixtures(size: int | tuple[int, int]) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The ``opened`` and ``analysis`` fixtures (module scope) at ``size`` px: an int for a
    square image, or (H, W)."""
    h, w = (size, size) if isinstance(size, int) else size

    @pytest.fixture(scope="module")
    def opened(loaded):
        """(loaded model, one input (C, H, W)), as the interventions' tests take it."""
        return loaded, torch.randn(3, h, w, generator=torch.Generator().manual_seed(9))

    @pytest.fixture(scope="module")
    def analysis(loaded):
        """The kind's analysis of one random (H, W, 3) uint8 image."""
        image = np.random.default_rng(3).integers(0, 255, (h, w, 3), dtype=np.uint8)
        return analyze(loaded, image)

    return opened, analysis
