"""What knocking heads out costs (DESIGN §5, "Interventions"), against bare forward passes of the
same model timed in turns in the same run.

A ViT with random weights (``--variant``, default vit_base_patch16_224; ``--quick``: a tiny one),
batch 1, on ``--device`` (default cpu):

  (a) baseline: ``model(x)``, the fused forward under ``torch.inference_mode()``;
  (p) a plain analysis (``analyze``: attention captured), for reference;
  (k) one knocked-out head in the window: the analysis run again with the head held out (the
      engine's ``knock_out`` path: ``holding`` hooks + the kind's analysis);
  (e) every single-head effect (``head_effects``: one full pass, then the single-head passes)
      in the per-layer plan: each pass a layer's heads (``--batch`` rows, default 2 on a CPU, a
      layer's heads elsewhere), starting at that layer's cached input;
  (g) the same effects in the multi-layer plan (``vitviz.pipeline.head_passes``): heads of
      several layers in one pass from the lowest one's cached input, each row's head replaced
      in its row alone, the layers grouped for a launch cost of ``GPU_LAUNCH_ROWS`` rows
      (``--launch X,Y``: one more case for each other cost), rows up to ``--batch`` or what
      fits in memory;
  (m) memory: each plan's peak against one analysis's (p), each measured in a fresh child
      process of this script that builds the same model first: on the CPU the peak resident
      memory (VmHWM, reset after the model is built) above the resident memory then; on a GPU
      the peak allocated memory above the allocated memory then. The weights are not in either
      (with them, the totals are printed beside).

A table of the plans says what each runs: passes, rows, layer runs (Σ over passes of the layers
each runs: a pass's kernel launches grow with them) and rows × layers (the work), beside a bare
forward's (1 pass, 1 row, L layer runs).

Targets, on the device's own plan (the per-layer one on a CPU, the multi-layer one elsewhere):
(k) / (a) ≤ 1.3; effects / (L·H · a) ≤ 0.6 on the CPU, effects / a ≤ 15 on a GPU; (m) ≤ 1.5.
The effects reuse the full pass's blocks below each pass (``vitviz.pipeline.reuse``), so (e) is
about half of L·H forwards; the other plan is reported beside it.

    .venv/bin/python benchmarks/ablation.py [--quick] [--no-check] [--variant NAME] [--device D]
        [--batch K] [--launch X,Y]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import torch
from _common import (
    Check,
    Stats,
    add_device_option,
    bench_device,
    device_name,
    finish,
    interleaved,
    parser,
    print_table,
    print_timed_report,
    read_args,
    repeats_and_warmup,
    synced,
    target_cells,
    timing_cells,
)
from _models import random_vit

from vitviz.checkpoints.loaded import LoadedModel
from vitviz.pipeline.analysis import analyze
from vitviz.pipeline.head_effects import full_pass, head_effects, kept_bytes
from vitviz.pipeline.head_passes import (
    CPU_ROWS,
    GPU_LAUNCH_ROWS,
    PassPlan,
    multi_layer,
    per_layer,
    rows_that_fit,
)
from vitviz.pipeline.interventions import head_layout, holding, model_input

TARGET_KNOCK = 1.3
TARGET_EFFECTS_CPU = 0.6  # of L·H bare forwards
TARGET_EFFECTS_GPU = 15.0  # bare forwards
TARGET_MEMORY = 1.5
LABELS = {
    "a": "(a) bare forward (baseline)",
    "p": "(p) plain analysis",
    "k": "(k) analysis, one head knocked out",
    "e": "(e) every single-head effect, per-layer plan",
    "g": "(g) every single-head effect, multi-layer plan",
}


def build(variant: str, quick: bool, device: torch.device) -> LoadedModel:
    overrides = dict(image_size=32, patch_size=8, dim=32, depth=2, heads=2) if quick else {}
    loaded = random_vit("vit-tiny" if quick else variant, 0, **overrides)
    loaded.model.to(device)
    return loaded


def launches(args) -> list[float]:
    """The launch costs of the multi-layer cases: ``GPU_LAUNCH_ROWS``, then ``--launch``'s."""
    more = [float(v) for v in args.launch.split(",") if v.strip()] if args.launch else []
    return [GPU_LAUNCH_ROWS, *(v for v in more if v != GPU_LAUNCH_ROWS)]


def plans(loaded: LoadedModel, x: torch.Tensor, args) -> dict[str, PassPlan]:
    """{case: its plan} of the single-head passes of ``x`` (C, H, W): "e" per layer (``--batch``
    rows, default 2 on a CPU, a layer's heads elsewhere), "g" multi-layer at the GPU's launch
    cost, "g<cost>" at each other ``--launch`` (rows: ``--batch``, else what fits in memory)."""
    xb = model_input(loaded, x)
    base, _ = full_pass(loaded.kind, loaded.model, xb)
    counts = [int(h.shape[1]) for h in base.heads]
    cpu = xb.device.type == "cpu"
    rows_e = args.batch or (min(CPU_ROWS, max(counts)) if cpu else max(counts))
    rows_g = args.batch or rows_that_fit(xb.device, kept_bytes(base), sum(counts))
    out = {"e": per_layer(counts, rows_e)}
    for cost in launches(args):
        name = "g" if cost == GPU_LAUNCH_ROWS else f"g{cost:g}"
        out[name] = multi_layer(counts, rows_g, cost)
    return out


def label(case: str) -> str:
    if case in LABELS:
        return LABELS[case]
    return f"{LABELS['g']}, launch {case[1:]}"


def _status_mib(key: str) -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith(key + ":"))


def child(case: str, args, device: torch.device) -> None:
    """Run one case (p, e or g) on a model built here; print as JSON (MiB) its peak above the
    memory once the model is built (``growth``), the whole peak and that memory."""
    on_gpu = device.type == "cuda"
    before = torch.cuda.memory_allocated(device) if on_gpu else 0
    loaded = build(args.variant, args.quick, device)
    size = loaded.model.config.image_size
    x = torch.randn(3, *size, generator=torch.Generator().manual_seed(1)).to(device)
    _ = loaded.kind  # resolved before the reset
    plan = plans(loaded, x, args).get(case)  # planned before the reset: no pass counts twice
    if on_gpu:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        start = torch.cuda.memory_allocated(device)
    else:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # the peak (VmHWM) from here on: the model's building is not in it
        start = _status_mib("VmRSS")
    if case == "p":
        analyze(loaded, x)
    else:
        head_effects(loaded, x, plan=plan)
    if on_gpu:
        torch.cuda.synchronize(device)
        peak, model_mib = torch.cuda.max_memory_allocated(device), start - before
        peak, start, model_mib = peak / 2**20, start / 2**20, model_mib / 2**20
    else:
        peak, model_mib = _status_mib("VmHWM"), start
    print(json.dumps({"growth": peak - start, "total": peak, "model": model_mib}))


def measured(case: str, args) -> dict:
    """``child``'s numbers, from a fresh process of this script."""
    cmd = [sys.executable, __file__, "--child", case, "--variant", args.variant]
    cmd += ["--device", str(args.device)] + (["--quick"] if args.quick else [])
    cmd += ["--batch", str(args.batch)] if args.batch else []
    cmd += ["--threads", str(args.threads)] if args.threads else []
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"memory case {case} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def plan_rows(planned: dict[str, PassPlan], L: int) -> list[list[str]]:
    """The plans' table rows, a bare forward's first."""
    rows = [["(a) bare forward", "1", "1", "1", str(L), "1.00", "1.0", str(L), ""]]
    least = planned["e"].row_layers
    for case, plan in planned.items():
        rows.append([
            label(case), str(len(plan.passes)), str(plan.rows), str(plan.widest),
            str(plan.layer_runs), f"{plan.layer_runs / L:.2f}",
            f"{plan.row_layers / plan.layer_runs:.1f}", str(plan.row_layers),
            f"{plan.row_layers / least:.2f}",
        ])  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    add_device_option(p)
    p.add_argument("--variant", default="vit-base", help="vit-tiny, vit-small, vit-base, …")
    p.add_argument("--batch", type=int, default=None, help="rows per pass (default: by device)")
    p.add_argument("--launch", default="", help="more multi-layer cases: launch costs, in rows")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = read_args(p, argv)
    device = bench_device(args.device)
    if args.child:
        child(args.child, args, device)
        return 0
    on_gpu = device.type == "cuda"
    own = "g" if on_gpu else "e"  # the plan head_effects picks on this device
    memory = {case: measured(case, args) for case in ("p", "e", "g")}
    repeats, warmup = repeats_and_warmup(args, quick=(2, 1), full=(5, 1))
    loaded = build(args.variant, args.quick, device)
    model, kind = loaded.model, loaded.kind
    size = model.config.image_size
    x = torch.randn(3, *size, generator=torch.Generator().manual_seed(1)).to(device)
    layout = head_layout(kind, model, x[None])
    L, H = layout.layers, max(layout.heads)
    head = (L // 2, H // 2)
    planned = plans(loaded, x, args)
    effects = {case: head_effects(loaded, x, plan=plan) for case, plan in planned.items()}

    wrong = []
    with holding(layout, {head: None}):
        knocked = kind.analyze(loaded, x).logits
    c = effects["e"].target
    want = float(effects["e"].logits[c] - knocked[c].cpu())
    if abs(float(effects["e"].effect[head]) - want) > 1e-3 * (1 + abs(want)):
        wrong.append(f"head {head}: effect {float(effects['e'].effect[head])} != {want}")
    scale = 1 + float(effects["e"].effect.abs().max())
    for case, got in effects.items():
        diff = float((got.effect - effects["e"].effect).abs().max())
        if diff > 1e-3 * scale:
            wrong.append(f"{label(case)}: effects differ from the per-layer plan's by {diff:.2e}")

    def bare() -> None:
        with torch.inference_mode():
            model(x[None])

    def knock() -> None:
        with holding(layout, {head: None}):
            kind.analyze(loaded, x)

    cases = {
        "a": synced(bare, device),
        "p": synced(lambda: analyze(loaded, x), device),
        "k": synced(knock, device),
    }
    for case, plan in planned.items():
        cases[case] = synced(lambda plan=plan: head_effects(loaded, x, plan=plan), device)
    stats = {k: Stats.of(v) for k, v in interleaved(cases, repeats, warmup).items()}
    base = stats["a"].median
    effects_ratio = stats[own].median / (base if on_gpu else base * L * H)
    knock_ratio = stats["k"].median / base
    effects_name = (
        f"({own}) effects / bare forward" if on_gpu else f"({own}) effects / ({L}·{H} forwards)"
    )
    effects_target = TARGET_EFFECTS_GPU if on_gpu else TARGET_EFFECTS_CPU
    checks = {
        "k": Check("(k) knocked-out analysis / bare forward", knock_ratio, TARGET_KNOCK, True),
        own: Check(effects_name, effects_ratio, effects_target, True),
    }
    memory_ratio = memory[own]["growth"] / memory["p"]["growth"]
    checks["m"] = Check(f"(m) memory of the effects ({own}) / of one analysis", memory_ratio,
                        TARGET_MEMORY, True)  # fmt: skip
    rows = []
    for key, s in stats.items():
        check = checks.get(key)
        ratio = s.median / base
        if key not in ("a", "p", "k") and not on_gpu:
            ratio_cell = f"{ratio:.2f} ({s.median / (base * L * H):.2f} of {L * H})"
        else:
            ratio_cell = "1.00" if key == "a" else f"{ratio:.2f}"
        rows.append([
            *timing_cells(label(key), s), ratio_cell, *target_cells(check, baseline=key == "a")
        ])  # fmt: skip
    print_timed_report(
        f"knocking heads out of {'a tiny ViT' if args.quick else args.variant}, "
        f"{L} layers × {H} heads, at {size[0]}×{size[1]}",
        ["case", "median", "p90", "min", "× (a)", "target", ""],
        rows,
        repeats,
        warmup,
        args.quick,
        device_line=f"device: {device_name(device)}",
    )
    print("the plans' passes: layer runs (Σ over passes of the layers each runs; kernel launches "
          "grow with them), rows per layer run, rows × layers (the work)")  # fmt: skip
    print_table(
        ["plan", "passes", "rows", "widest pass", "layer runs", "÷ L", "rows / layer run",
         "rows × layers", "× (e)"],
        plan_rows(planned, L),
    )  # fmt: skip
    what = "peak allocated" if on_gpu else "peak resident (VmHWM)"
    whole = "all allocated memory" if on_gpu else "the process's, Python and torch too"
    print(f"memory, each case in a fresh process: {what} above what it was once the model was "
          f"built ({memory['p']['model']:.0f} MiB), and the whole peak ({whole}), MiB")  # fmt: skip
    mem_rows = [[LABELS["p"], f"{memory['p']['growth']:.0f}", f"{memory['p']['total']:.0f}",
                 "1.00", "baseline", ""]]  # fmt: skip
    for case in ("e", "g"):
        check = checks["m"] if case == own else None
        mem_rows.append([
            LABELS[case], f"{memory[case]['growth']:.0f}", f"{memory[case]['total']:.0f}",
            f"{memory[case]['growth'] / memory['p']['growth']:.2f}",
            check.target if check else "info", check.verdict if check else "",
        ])  # fmt: skip
    print_table(["case", "peak growth", "whole peak", "× (p)", "target", ""], mem_rows)
    return finish(list(checks.values()), args.no_check, wrong)


if __name__ == "__main__":
    sys.exit(main())
