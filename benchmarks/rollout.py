"""Attention rollout: vitviz's row method against chaining full N × N matrices.

The baseline is rollout as public implementations write it: for each layer, fuse the heads by
mean, add the identity, normalise the rows, ``result = torch.matmul(a, result)`` over full
N × N matrices (O(L·N³)), then take row q. vitviz's ``explain.rollout_row`` propagates only row
q (O(L·N²)). Both get the same random post-softmax float32 attention, L × (1, H, N, N), batch 1,
discard ratio 0, query CLS; their patch maps, each scaled to max 1, must agree within 1e-5
(checked for a centre-patch query too).

Three rows per size:
- raw (info): from the per-head attention, end to end. Both must read every head of every layer
  to fuse them (O(L·H·N²), memory-bound), which bounds the end-to-end gain whatever the product
  costs; on 2 cores the fusion is a large share of the total.
- fused (info): from head-fused layers L × (1, 1, N, N): adding I and normalising included.
- Ã_l ready (target): the rollout product itself, from the normalised layer matrices that
  ``PreparedRollout`` keeps per analysis and settings, i.e. the cost of a new query (a click on a
  patch). Baseline: the same matrices chained by full products. Target: ≥ 20× at N = 577.
- read floor (info): one gemv over a copy of all L layers at once, i.e. reading the L·N² floats
  a query must read, cold, with no per-layer cost: the speed-up no row method can pass here.

    .venv/bin/python benchmarks/rollout.py [--quick] [--no-check] [--repeats N]
        [--device cpu|cuda|mps]
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from _common import (
    Check,
    Stats,
    add_device_option,
    bench_device,
    device_name,
    environment,
    finish,
    fmt_seconds,
    interleaved,
    parser,
    peak_rss_mib,
    print_table,
    read_args,
    synced,
)
from torch import Tensor

from vitviz.explain import PreparedRollout, rollout_row

TARGET_N = 577
TARGET_SPEEDUP = 20.0  # at least, at N = TARGET_N, per query from prepared Ã_l
TOLERANCE = 1e-5  # max |Δ| of the patch maps scaled to max 1
LOGIT_SCALE = 3.0  # spreads the random softmax rows so they are not near-uniform


@dataclass(frozen=True)
class Case:
    tokens: int  # N = 1 + gh·gw (one CLS token)
    layers: int
    heads: int
    repeats: int  # timed repeats in full mode

    @property
    def grid_side(self) -> int:
        side = math.isqrt(self.tokens - 1)
        if side * side != self.tokens - 1:
            raise ValueError(f"N = {self.tokens} is not 1 + a square grid of patches")
        return side


FULL = (Case(197, 12, 12, 30), Case(577, 24, 16, 15), Case(1370, 24, 16, 7))
QUICK = (Case(17, 2, 2, 3), Case(50, 3, 2, 3))


def random_attention(case: Case, seed: int, device: torch.device | None = None) -> Tensor:
    """(L, H, N, N) float32 post-softmax attention, filled one layer at a time.

    Layer by layer keeps the peak to the result plus one layer's temporary (2.9 GB + 120 MB
    at N = 1370, 24 layers, 16 heads).
    """
    gen = torch.Generator().manual_seed(seed)
    L, H, N = case.layers, case.heads, case.tokens
    attn = torch.empty(L, H, N, N, device=device)
    for layer in attn:  # drawn on the host (the same numbers on every device), then moved
        layer.copy_(torch.randn(H, N, N, generator=gen).mul_(LOGIT_SCALE).softmax(dim=-1))
    return attn


def full_product_rollout(attentions: Sequence[Tensor]) -> Tensor:
    """Baseline: R = Ã_L ⋯ Ã_1 by chaining full N × N matrices: L × (1, H, N, N) -> (N, N)."""
    N = attentions[0].shape[-1]
    eye = torch.eye(N, device=attentions[0].device)
    result = eye
    with torch.no_grad():
        for attention in attentions:  # first layer to last
            fused = attention.mean(dim=1)[0]  # (N, N)
            a = fused + eye
            a = a / a.sum(dim=-1, keepdim=True)
            result = torch.matmul(a, result)
    return result


def chain_normalized(normalized: Sequence[Tensor]) -> Tensor:
    """Baseline on prepared layers: R = Ã_L ⋯ Ã_1 from L × (1, N, N) normalised matrices."""
    result = torch.eye(normalized[0].shape[-1], device=normalized[0].device)
    with torch.no_grad():
        for a in normalized:  # first layer to last
            result = torch.matmul(a[0], result)
    return result


def patch_map(row: Tensor) -> Tensor:
    """Token row (N,) -> patch values scaled to max 1 (the map of DESIGN §5, flattened)."""
    patches = row[1:]
    return patches / patches.max()


def check_case(case: Case, layers: Sequence[Tensor], label: str) -> tuple[float, list[str]]:
    """Max |Δ| between the two methods' maps for the CLS and the centre-patch query."""
    full = full_product_rollout(layers)
    side = case.grid_side
    centre = 1 + (side // 2) * side + side // 2
    worst = 0.0
    for query in (0, centre):
        row = rollout_row(layers, query=query, num_prefix=1)[0]
        worst = max(worst, float((patch_map(row) - patch_map(full[query])).abs().max()))
    wrong = []
    if not worst <= TOLERANCE:  # also catches NaN
        wrong.append(f"N = {case.tokens} ({label}): maps differ by {worst:.2e} > {TOLERANCE:g}")
    return worst, wrong


def check_prepared(case: Case, prepared: PreparedRollout) -> tuple[float, list[str]]:
    """Max |Δ| between a prepared row and the row of the chained normalised matrices."""
    full = chain_normalized(prepared.normalized)
    side = case.grid_side
    centre = 1 + (side // 2) * side + side // 2
    worst = max(
        float((patch_map(prepared.row(q, 1)[0]) - patch_map(full[q])).abs().max())
        for q in (0, centre)
    )
    bad = (
        [] if worst <= TOLERANCE else [f"N = {case.tokens} (prepared): maps differ by {worst:.2e}"]
    )
    return worst, bad


def table_row(
    case: Case, layers: str, full: Stats, row: Stats, target: str, diff: str, verdict: str
) -> list[str]:
    """One line of the table: the full product against one row method."""
    return [
        f"{case.tokens}",
        layers,
        f"{fmt_seconds(full.median)} ({fmt_seconds(full.p90)})",
        f"{fmt_seconds(row.median)} ({fmt_seconds(row.p90)})",
        f"{full.median / row.median:.1f}×",
        target,
        diff,
        verdict,
    ]


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    add_device_option(p)
    args = read_args(p, argv)
    device = bench_device(args.device)
    cases = QUICK if args.quick else FULL
    warmup = args.warmup if args.warmup is not None else 1

    rows: list[list[str]] = []
    checks: list[Check] = []
    wrong: list[str] = []
    for i, case in enumerate(cases):
        repeats = args.repeats or case.repeats
        attn = random_attention(case, seed=i, device=device)
        raw = [a[None] for a in attn]  # L × (1, H, N, N) views, as Analysis hands them out
        fused = [a.mean(dim=1, keepdim=True) for a in raw]  # L × (1, 1, N, N)
        prepared = PreparedRollout([f[:, 0] for f in fused])  # Ã_l, normalised once
        for label, layers in (("raw", raw), ("fused", fused), ("prepared", prepared)):
            if label == "prepared":
                diff, bad = check_prepared(case, prepared)
                ready = prepared.normalized.clone()  # the baseline's own copy (no shared cache)
                floor_data = prepared.normalized.clone().view(-1, case.tokens)  # (L·N, N)
                vector = torch.rand(case.tokens, device=device)
                jobs = {
                    "full": lambda m=ready: chain_normalized(m)[0],
                    "row": lambda p=prepared: p.row(0, 1),
                    "floor": lambda a=floor_data, v=vector: torch.mv(a, v),
                }
            else:
                diff, bad = check_case(case, layers, label)
                jobs = {
                    "full": lambda layers=layers: full_product_rollout(layers)[0],
                    "row": lambda layers=layers: rollout_row(layers, query=0, num_prefix=1),
                }
            wrong += bad
            jobs = {k: synced(fn, device) for k, fn in jobs.items()}
            times = interleaved(jobs, repeats, warmup)
            full, row = Stats.of(times["full"]), Stats.of(times["row"])
            speedup = full.median / row.median
            check = None
            if label == "prepared" and case.tokens == TARGET_N:
                check = Check(f"speed-up at N = {TARGET_N}", speedup, TARGET_SPEEDUP, False)
                checks.append(check)
            heads = case.heads if label == "raw" else 1
            suffix = {"raw": "", "fused": " (fused)", "prepared": " (Ã_l ready)"}[label]
            verdict = check.verdict if check else ("" if diff <= TOLERANCE else "WRONG")
            rows.append(
                table_row(
                    case,
                    f"{case.layers} × {heads}" + suffix,
                    full,
                    row,
                    check.target if check else "info",
                    f"{diff:.1e}",
                    verdict,
                )
            )
            if label == "prepared":  # what reading the layers once costs: the row's lower bound
                floor = Stats.of(times["floor"])
                floor_layers = f"{case.layers} × 1 (read floor)"
                rows.append(table_row(case, floor_layers, full, floor, "info", "", ""))
            print(f"N = {case.tokens} {label}: {repeats} repeats done", file=sys.stderr)
        del attn, raw, fused, prepared

    print("# Attention rollout: row method (vitviz.explain.rollout_row) vs full-matrix chain")
    print(f"device: {device_name(device)}")
    print(environment())
    print(
        "float32, batch 1, discard 0, CLS query; times are median (p90); "
        f"max Δ = max abs difference of the maps scaled to max 1, tolerance {TOLERANCE:g}"
        + (" (--quick: timings are not meaningful)" if args.quick else "")
    )
    print()
    print_table(
        [
            "N",
            "layers × heads",
            "full product",
            "row method",
            "speed-up",
            "target",
            "max Δ",
            "verdict",
        ],
        rows,
    )
    print()
    print(f"peak RSS: {peak_rss_mib():.0f} MiB")
    return finish(checks, args.no_check, wrong)


if __name__ == "__main__":
    sys.exit(main())
