"""Which single-head passes of the head effects and patching run together (DESIGN §5,
"Interventions"): a plan of passes, each a batch of rows, row j replacing one head (l, h).

A pass starts at the lowest layer among its heads (the blocks below it hand the batch their
full-pass outputs, ``vitviz.pipeline.reuse``) and each row's head is replaced in its row only
(the accessor's ``OnRows``): a row whose layer is higher computes the layers below it clean, as
the full pass did. So any grouping gives the single-head passes; the plans differ in cost:

- ``per-layer``: each pass holds heads of one layer (``rows`` of them), the least work: a row
  runs from its own layer up (on a CPU, whose time is the work, the plan it runs).
- ``multi-layer``: heads of several consecutive layers in one pass, grouped to minimise
  Σ over passes (layers run) · (``launch`` + rows): a pass costs per layer it runs a fixed
  ``launch`` (a GPU's kernel launches, in rows' worth of work) plus its rows' work, so lower
  layers' heads join a higher layer's pass where that saves more launches than it adds rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from vitviz.pipeline.memory import USABLE_FRACTION, available_memory

Head = tuple[int, int]
PLANS = ("per-layer", "multi-layer")

# Rows per pass when the caller names none. On a CPU a few, so that a pass's activations stay
# within about one analysis's memory (the time per head is the same).
CPU_ROWS = 2
# A pass's cost per layer it runs, beyond its rows' work, in rows: the per-layer plan of
# ViT-B/16 at 224 on an H100 (12 passes, 78 layer runs of 12 rows) took 16.2 bare forwards of
# batch 1 (12 layer runs of 1 row); a layer run costing ``launch + rows`` gives launch ≈ 6.4.
# Measured once, on one card: benchmarks/ablation.py prints each plan's time beside it.
GPU_LAUNCH_ROWS = 6.4


@dataclass(frozen=True)
class PassPlan:
    """``passes``: each pass's heads, one per row, in row order; ``layers``: the model's L."""

    passes: tuple[tuple[Head, ...], ...]
    layers: int

    @staticmethod
    def start(heads: Sequence[Head]) -> int:
        """The layer a pass of ``heads`` starts at: the lowest."""
        return min(layer for layer, _ in heads)

    @property
    def rows(self) -> int:
        """Rows of every pass together (each head once)."""
        return sum(len(p) for p in self.passes)

    @property
    def widest(self) -> int:
        """The most rows of one pass."""
        return max((len(p) for p in self.passes), default=0)

    @property
    def layer_runs(self) -> int:
        """Σ over passes of the layers each runs: what a pass's kernel launches grow with."""
        return sum(self.layers - self.start(p) for p in self.passes)

    @property
    def row_layers(self) -> int:
        """Σ over passes of rows · layers run: what the work grows with."""
        return sum(len(p) * (self.layers - self.start(p)) for p in self.passes)


def every_head(counts: Sequence[int]) -> list[Head]:
    """(layer, head) of a model whose layers have ``counts`` heads, layer by layer."""
    return [(layer, h) for layer, H in enumerate(counts) for h in range(H)]


def per_layer(counts: Sequence[int], rows: int) -> PassPlan:
    """Each layer's heads in passes of up to ``rows``, in order."""
    rows = max(1, rows)
    passes = [
        tuple((layer, h) for h in range(start, min(H, start + rows)))
        for layer, H in enumerate(counts)
        for start in range(0, H, rows)
    ]
    return PassPlan(tuple(passes), len(counts))


def multi_layer(counts: Sequence[int], rows: int, launch: float = GPU_LAUNCH_ROWS) -> PassPlan:
    """The heads, in order, cut into passes of up to ``rows`` that minimise Σ (layers run) ·
    (``launch`` + rows) (exactly: dynamic programming over the cut points; fewer passes where
    costs tie)."""
    heads = every_head(counts)
    L, n, rows = len(counts), len(heads), max(1, rows)
    best: list[tuple[float, int]] = [(0.0, 0)] * (n + 1)  # (cost of heads[i:], passes)
    cut = [n] * (n + 1)
    for i in range(n - 1, -1, -1):
        run = L - heads[i][0]
        choice: tuple[float, int] | None = None
        for j in range(min(n, i + rows), i, -1):  # widest first: ties keep fewer passes
            cost, passes = best[j]
            here = (run * (launch + (j - i)) + cost, passes + 1)
            if choice is None or here < choice:
                choice, cut[i] = here, j
        assert choice is not None
        best[i] = choice
    passes, i = [], 0
    while i < n:
        passes.append(tuple(heads[i : cut[i]]))
        i = cut[i]
    return PassPlan(tuple(passes), L)


def rows_that_fit(device: torch.device, row_bytes: int, heads: int) -> int:
    """Rows per pass whose activations (``row_bytes`` each) fit in what is free on ``device``
    (the memory plan's budget, DESIGN §7), at most ``heads`` and at least 1."""
    free = available_memory(device)
    if free is None or row_bytes <= 0:
        return heads
    return max(1, min(heads, int(USABLE_FRACTION * free) // row_bytes))


def plan_for(
    counts: Sequence[int],
    device: torch.device,
    plan: str | None = None,
    rows: int | None = None,
    row_bytes: int = 0,
) -> PassPlan:
    """The passes for a model whose layers have ``counts`` heads, its input on ``device``:
    ``plan`` (``PLANS``; default per-layer on a CPU, multi-layer elsewhere) with ``rows`` rows
    per pass at most (default on a CPU ``CPU_ROWS``; elsewhere what fits in its memory,
    ``row_bytes`` a row, up to every head); ValueError for another plan or rows < 1."""
    if plan is None:
        plan = "per-layer" if device.type == "cpu" else "multi-layer"
    if plan not in PLANS:
        raise ValueError(f"plan {plan!r}: use one of {', '.join(PLANS)}")
    if rows is not None and rows < 1:
        raise ValueError(f"rows per pass must be at least 1, got {rows}")
    total = sum(counts)
    if rows is None:
        rows = CPU_ROWS if device.type == "cpu" else rows_that_fit(device, row_bytes, total)
    if plan == "per-layer":
        return per_layer(counts, rows)
    return multi_layer(counts, rows)
