"""What a click costs the window with a Swin: the engine's maps of a new query point.

Swin-T (widths 96-768, depths 2-2-6-2, window 7) at 224 with random weights, batch 1, measured
in turns on the CPU:

  (a) baseline: ``model(x)``, the fused forward under ``torch.inference_mode()`` (info);
  (q) ``jobs.compute_maps`` with the method ``attention`` for a new query cell: the token under
      it in every block, its row of Â_b for every head at the block's resolution, resampled to
      the first stage's grid for the thumbnails, the mean over heads and the colour levels
      (all the engine does between a click and the maps reaching the window);
  (r) the same with the method ``rollout``: plus the windowed rollout from the last stage's
      token under the click (info).

Target: median(q) ≤ 20 ms. The window's own drawing of the result comes on top.

    .venv/bin/python benchmarks/swin_window.py [--quick] [--no-check] [--repeats N]
"""

from __future__ import annotations

import itertools
import sys
from types import SimpleNamespace

import torch
from _common import (
    Check,
    Stats,
    finish,
    interleaved,
    parser,
    print_timed_report,
    read_args,
    repeats_and_warmup,
    timing_cells,
)
from swin import QUICK, SWIN_T, build

from vitviz.kindapi import get_kind
from vitviz.kinds.swin.analysis import analyze_swin
from vitviz.kinds.swin.attention import query_row, token_at
from vitviz.workers import jobs
from vitviz.workers.messages import MapParams

TARGET_QUERY_S = 0.020
LABELS = {
    "a": "(a) model(x), inference_mode",
    "q": "(q) query change, attention maps of every block and head",
    "r": "(r) query change, method rollout",
}


def check_results(state: jobs.EngineState) -> list[str]:
    """The maps must be the query's rows of Â_b: checked for one cell in every block."""
    a, patch = state.analysis, state.loaded.model.config.patch_size
    maps = jobs.compute_maps(state, MapParams(query=(2, 3)))
    wrong = []
    for b, (attn, layout) in enumerate(zip(a.attentions, a.layouts, strict=True)):
        token = token_at(layout, patch * 2 ** a.block_stages[b], (2.5 * patch, 3.5 * patch))
        row = query_row(attn, layout, token).reshape(-1, *layout.grid).numpy()
        if float(abs(maps.layer_maps[b] - row).max()) > 1e-6:
            wrong.append(f"block {b}: the maps are not the query's rows")
    return wrong


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    args = read_args(p, argv)
    config = QUICK if args.quick else SWIN_T
    repeats, warmup = repeats_and_warmup(args, quick=(3, 1), full=(30, 3))
    model = build(config, torch.device("cpu"))
    x = torch.randn(1, config.in_channels, *config.image_size)
    state = jobs.EngineState(loaded=SimpleNamespace(model=model, kind=get_kind("swin")))
    state.analysis = analyze_swin(model, x[0])
    gh, gw = state.analysis.stage_grids[0]
    cells = itertools.cycle([(7 * i % gh, 13 * i % gw) for i in range(97)])
    jobs.compute_maps(state, MapParams(method="rollout"))  # the rollout's matrices, built once
    wrong = check_results(state)

    def bare_forward() -> object:
        with torch.inference_mode():
            return model(x)

    def attention_query() -> object:
        return jobs.compute_maps(state, MapParams(query=next(cells)))

    def rollout_query() -> object:
        return jobs.compute_maps(state, MapParams(query=next(cells), method="rollout"))

    cases = {"a": bare_forward, "q": attention_query, "r": rollout_query}
    times = interleaved(cases, repeats, warmup)
    stats = {k: Stats.of(v) for k, v in times.items()}
    check = Check("(q) query change, seconds", stats["q"].median, TARGET_QUERY_S, True)
    rows = []
    for key, s in stats.items():
        target = f"≤ {TARGET_QUERY_S * 1e3:g} ms" if key == "q" else "info"
        verdict = check.verdict if key == "q" else ""
        rows.append([*timing_cells(LABELS[key], s), target, verdict])
    print_timed_report(
        f"A Swin's query change in the window: widths {'-'.join(map(str, config.dims))}, "
        f"depths {'-'.join(map(str, config.depths))}, window {config.window_sizes[0]}, at "
        f"{config.image_size[0]}×{config.image_size[1]}, cpu, batch 1",
        ["case", "median", "p90", "min", "target", "verdict"],
        rows,
        repeats,
        warmup,
        args.quick,
    )
    return finish([check], args.no_check, wrong)


if __name__ == "__main__":
    sys.exit(main())
