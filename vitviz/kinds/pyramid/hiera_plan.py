"""What each block of a Hiera does to the token grids, for the analysis: its keys (every token
of its input grid: ``identity``), its residual (the first block of a stage: each token spread
evenly over the 2 × 2 tokens its max-pool read, a stated convention since max is not linear;
else None, the identity), the stage steps (the same 2 × 2 spreads), the block in words and its
mask units ((H, W) int32 unit id per query token, None for global attention)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vitviz.kinds.pyramid.hiera_network import HieraViT, window_ids
from vitviz.kinds.pyramid.reduction import Reduction, identity, key_reduction


@dataclass
class HieraPlan:
    keys: list[Reduction]  # per block: its keys (the input grid) -> the input grid
    residuals: list[Reduction | None]  # per block: output grid -> input grid (None: identity)
    stages: list[Reduction]  # per stage boundary s -> s + 1: the 2 × 2 spread
    words: list[str]  # per block
    windows: list[np.ndarray | None]  # per block: (H_s, W_s) mask unit of each query token


def hiera_plan(model: HieraViT, grids: list[tuple[int, int]]) -> HieraPlan:
    """The plan of every block of ``model`` run on first-stage grid ``grids[0]``."""
    cfg = model.config
    q = cfg.q_stride
    plan = HieraPlan([], [], [], [], [])
    for s in range(len(grids) - 1):
        plan.stages.append(key_reduction(grids[s], q[0], False, 1))
    for b, s in enumerate(model.block_stages):
        pools, windowed, g_in, g_out = model.block_plan(b, grids[0])
        plan.keys.append(identity(g_in))
        plan.residuals.append(plan.stages[s - 1] if pools else None)
        unit = (cfg.mask_unit[0] // q[0] ** s, cfg.mask_unit[1] // q[1] ** s)
        scope = f"within mask units of {unit[0]}×{unit[1]} tokens" if windowed else "global"
        pooled = f", queries max-pooled {q[0]}×{q[1]} from {g_in[0]}×{g_in[1]}" if pools else ""
        plan.words.append(f"attention {scope}{pooled}")
        plan.windows.append(
            window_ids(g_out, unit).reshape(g_out).numpy().astype(np.int32) if windowed else None
        )
    return plan
