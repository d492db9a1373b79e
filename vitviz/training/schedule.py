"""Learning-rate schedule: linear warmup, then cosine decay. A pure function of the step."""

from __future__ import annotations

import math


def lr_at(
    step: int, base_lr: float, total_steps: int, warmup_steps: int = 0, min_lr: float = 0.0
) -> float:
    """Learning rate for optimizer step ``step`` (0-based) of ``total_steps``.

    Warmup: base_lr·(step + 1)/warmup_steps for step < warmup_steps, so the first step already
    moves. Then cosine from base_lr down to min_lr, reached at the last step; min_lr after it.
    """
    if step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    decay_steps = total_steps - warmup_steps
    if decay_steps <= 1:
        return base_lr if step < total_steps else min_lr
    t = min(1.0, (step - warmup_steps) / (decay_steps - 1))  # 0 .. 1
    return min_lr + 0.5 * (base_lr - min_lr) * (1.0 + math.cos(math.pi * t))
