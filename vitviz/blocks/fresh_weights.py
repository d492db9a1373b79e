"""What vitviz's networks share when made fresh rather than from a checkpoint (DESIGN §3): the
truncated-normal (std 0.02) Linear weights with zero biases timm's init gives, and the
stochastic-depth rate of each block, rising linearly over the network's depth."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn


def shapes_only(module: nn.Module) -> bool:
    """Whether ``module`` is on the meta device (a checkpoint's weights are about to be
    assigned): nothing to initialise."""
    return any(p.is_meta for p in module.parameters())


def init_linears(module: nn.Module) -> None:
    """Every Linear of ``module``: weight ~ truncated normal (std 0.02), bias 0."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)


def drop_path_rates(rate: float, depth: int) -> list[float]:
    """Per block (depth,): 0 for the first, ``rate`` for the last, linear between."""
    return [rate * i / max(depth - 1, 1) for i in range(depth)]


def stage_drop_path_rates(rate: float, depths: Sequence[int]) -> list[list[float]]:
    """``drop_path_rates`` over every block, cut into the stages of ``depths``."""
    rates = drop_path_rates(rate, sum(depths))
    return [rates[sum(depths[:s]) : sum(depths[: s + 1])] for s in range(len(depths))]
