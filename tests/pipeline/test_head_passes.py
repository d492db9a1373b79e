"""The plans of the single-head passes (DESIGN §5, "Interventions"): every head once, no pass
wider than asked, the per-layer plan as it always was, the multi-layer plan the cheapest cut of
the heads (checked against every cut of small models), and which plan a device gets."""

from __future__ import annotations

import itertools

import pytest
import torch

from vitviz.pipeline.head_passes import (
    CPU_ROWS,
    GPU_LAUNCH_ROWS,
    PassPlan,
    every_head,
    multi_layer,
    per_layer,
    plan_for,
)


def _cost(plan: PassPlan, launch: float) -> float:
    return launch * plan.layer_runs + plan.row_layers


def _every_cut(counts: list[int], rows: int, launch: float) -> float:
    """The cheapest cost over every way to cut the heads, in order, into passes of ≤ rows."""
    heads, best = every_head(counts), float("inf")
    n = len(heads)
    for k in range(n):
        for cuts in itertools.combinations(range(1, n), k):
            bounds = [0, *cuts, n]
            passes = tuple(tuple(heads[a:b]) for a, b in itertools.pairwise(bounds))
            if max(len(p) for p in passes) <= rows:
                best = min(best, _cost(PassPlan(passes, len(counts)), launch))
    return best


@pytest.mark.parametrize("counts", [[2, 2, 2], [1, 3, 2, 2], [3, 1, 1, 3]])
@pytest.mark.parametrize("rows", [1, 2, 3, 8])
@pytest.mark.parametrize("launch", [0.0, 1.5, GPU_LAUNCH_ROWS, 50.0])
def test_the_multi_layer_plan_is_the_cheapest_cut(counts, rows, launch) -> None:
    plan = multi_layer(counts, rows, launch)
    assert [key for p in plan.passes for key in p] == every_head(counts)  # each head once
    assert plan.widest <= rows
    assert _cost(plan, launch) == pytest.approx(_every_cut(counts, rows, launch))


def test_the_per_layer_plan_is_each_layers_heads_in_turn() -> None:
    plan = per_layer([3, 2], 2)
    assert plan.passes == (((0, 0), (0, 1)), ((0, 2),), ((1, 0), (1, 1)))
    assert (plan.layer_runs, plan.row_layers, plan.rows) == (2 + 2 + 1, 2 * 2 + 1 * 2 + 2, 5)


def test_a_gpu_runs_vit_b_in_far_fewer_layer_runs() -> None:
    """ViT-B (12 layers × 12 heads): the per-layer plan runs 78 layers in 12 passes of 12 rows;
    the multi-layer plan at most half the layer runs, for at most a quarter more work."""
    counts = [12] * 12
    layers, grouped = per_layer(counts, 12), multi_layer(counts, 144)
    assert (len(layers.passes), layers.layer_runs, layers.row_layers) == (12, 78, 936)
    assert grouped.layer_runs <= 39 and grouped.row_layers <= 1.25 * 936
    assert any(len({layer for layer, _ in p}) > 1 for p in grouped.passes)
    assert multi_layer(counts, 144, launch=0.0).row_layers == 936  # no launches: least work
    assert len(multi_layer(counts, 144, launch=1e6).passes) == 1  # launches only: one pass


def test_which_plan_a_device_gets(monkeypatch) -> None:
    counts = [4, 4, 4]
    assert plan_for(counts, torch.device("cpu")) == per_layer(counts, CPU_ROWS)
    assert plan_for(counts, torch.device("cpu"), "multi-layer", 5) == multi_layer(counts, 5)
    monkeypatch.setenv("VITVIZ_MEMORY_BUDGET", "1000")  # the memory plan: 9 rows of 100 bytes
    gpu = plan_for(counts, torch.device("cuda"), row_bytes=100)
    assert gpu == multi_layer(counts, 9) and gpu.widest <= 9
    monkeypatch.setenv("VITVIZ_MEMORY_BUDGET", "1G")
    assert plan_for(counts, torch.device("cuda"), row_bytes=100) == multi_layer(counts, 12)
    assert plan_for(counts, torch.device("cuda"), "per-layer", 3) == per_layer(counts, 3)
    with pytest.raises(ValueError, match="plan 'rows'"):
        plan_for(counts, torch.device("cpu"), "rows")
    with pytest.raises(ValueError, match="at least 1"):
        plan_for(counts, torch.device("cpu"), rows=0)
