"""The float64 references the pyramid kinds' method tests (PVT v2, Twins, Hiera) hold the
chained maps to: each method's per-block matrices (heads averaged), a start row carried back
through every block with full matrices, and vitviz's map of each method next to that
reference, normalised as vitviz shows it. Each kind's test gives its own key spreads and stage
steps, and makes its own assertions."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from vitviz.explain.methods import get_method

Chain = tuple[list[np.ndarray], str]  # the blocks' (N_q, N_k) matrices, "rollout" or "relevance"


def chain_definitions(
    A: Sequence[np.ndarray],
    G: Sequence[np.ndarray],
    names: Sequence[str] = ("rollout", "gradient-rollout", "relevance"),
) -> dict[str, Chain]:
    """``names``' matrices from the blocks' attention ``A`` and gradients ``G`` (heads, N_q,
    N_k): rollout the heads' mean, gradient rollout the mean of A·G clipped, relevance the mean
    of (G·A) clipped, each with how it chains."""
    every = {
        "rollout": ([t.mean(axis=0) for t in A], "rollout"),
        "gradient-rollout": (
            [(t * g).mean(axis=0).clip(0) for t, g in zip(A, G, strict=True)],
            "rollout",
        ),
        "relevance": (
            [(g * t).clip(0).mean(axis=0) for t, g in zip(A, G, strict=True)],
            "relevance",
        ),
    }
    return {name: every[name] for name in names}


def reference_row(
    mats: Sequence[np.ndarray],
    keys: Sequence[np.ndarray],
    stages_of: Sequence[int],
    grids: Sequence[tuple[int, int]],
    mode: str,
    start: np.ndarray,
    spread: Callable[[tuple[int, int], tuple[int, int]], np.ndarray],
) -> np.ndarray:
    """``start`` (N_S,) on the last stage's grid back through every block to the first stage:
    block b's step is its matrix times its keys' spread ``keys[b]`` (N_q, N_q), plus the
    identity (rownormed for a rollout); between stages ``spread(fine_grid, coarse_grid)``
    (N_coarse, N_fine)."""
    r = start
    current = len(grids) - 1
    for b in reversed(range(len(mats))):
        while current > stages_of[b]:
            r = r @ spread(grids[current - 1], grids[current])
            current -= 1
        mixed = mats[b] @ keys[b]  # (N, N)
        if mode == "rollout":
            full = mixed + np.eye(len(r))
            r = r @ (full / full.sum(axis=1, keepdims=True))
        else:
            r = r @ (np.eye(len(r)) + mixed)
    while current > 0:
        r = r @ spread(grids[current - 1], grids[current])
        current -= 1
    return r


def maps_and_references(
    a: Any,
    defs: dict[str, Chain],
    starts: Sequence[tuple[Any, np.ndarray]],
    row_of: Callable[[list[np.ndarray], str, np.ndarray], np.ndarray],
    grid: tuple[int, int],
) -> Iterator[tuple[str, Any, np.ndarray, np.ndarray]]:
    """For each method of ``defs`` and each (query, start row) of ``starts``: (name, query,
    vitviz's map of analysis ``a``, the reference ``row_of(mats, mode, start)`` shifted to 0
    for relevance, scaled to a maximum of 1 and laid on ``grid``)."""
    for name, (mats, mode) in defs.items():
        for query, start in starts:
            row = row_of(mats, mode, start)
            if mode == "relevance":
                row = row - row.min()
            expected = (row / row.max()).reshape(grid)
            yield name, query, get_method(name)(a, query, None, {}).numpy(), expected
