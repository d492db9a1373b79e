"""A seeded uniform random map: the baseline every faithfulness number is compared with."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor


def random_map(grid: tuple[int, int], seed: int = 0) -> Tensor:
    """(gh, gw) float32 uniform in [0, 1), the same for the same grid and seed on any device."""
    gh, gw = grid
    if gh < 1 or gw < 1:
        raise ValueError(f"the grid must have at least one patch (got {gh}×{gw})")
    g = torch.Generator().manual_seed(int(seed))
    return torch.rand(gh, gw, generator=g, dtype=torch.float32)


def random_method(
    analysis: Any, query: object, target_class: int | None, params: Mapping[str, Any]
) -> Tensor:
    """The table's ``random`` on every kind: ``random_map`` over the clickable grid of the
    analysis's kind (``TokenGeometry.grid``) with ``params['seed']``; query and class unused."""
    from vitviz.kindapi import get_kind

    grid = get_kind(analysis.kind).token_geometry(analysis).grid  # the kind it carries
    return random_map((int(grid[0]), int(grid[1])), int(params["seed"]))
