"""What knocking heads out costs (DESIGN §5, "Interventions"), against bare forward passes of the
same model timed in turns in the same run.

A ViT with random weights (``--variant``, default vit_base_patch16_224; ``--quick``: a tiny one),
batch 1, on ``--device`` (default cpu):

  (a) baseline: ``model(x)``, the fused forward under ``torch.inference_mode()``;
  (p) a plain analysis (``analyze``: attention captured), for reference;
  (k) one knocked-out head in the window: the analysis run again with the head held out (the
      engine's ``knock_out`` path: ``holding`` hooks + the kind's analysis);
  (e) every single-head effect (``head_effects``: one full pass, then each layer's heads as one
      batch), against L·H bare forwards (a × L·H);
  (m) memory: (e)'s peak against one analysis's (p), each measured in a fresh child process
      of this script that builds the same model first: on the CPU the peak resident memory
      (VmHWM, reset after the model is built) above the resident memory then; on a GPU the
      peak allocated memory above the allocated memory then. The weights are not in either
      (with them, the totals are printed beside).

Targets: (k) / (a) ≤ 1.3; (e) / (L·H · a) ≤ 0.6 on the CPU, (e) / a ≤ 15 on a GPU; (m) ≤ 1.5.
The effects reuse the full pass's blocks below each layer (``vitviz.pipeline.reuse``): a layer's
batch runs only its own block and those above, so (e) is about half of L·H forwards.
``--batch`` sets the heads per pass (default ``head_effects``'s choice for the device).

    .venv/bin/python benchmarks/ablation.py [--quick] [--no-check] [--variant NAME] [--device D]
        [--batch K]
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
    apply_threads,
    bench_device,
    device_name,
    finish,
    fmt_seconds,
    interleaved,
    parser,
    print_table,
    print_timed_report,
    synced,
)

from vitviz.blocks import create_model
from vitviz.checkpoints.loaded import LoadedModel
from vitviz.checkpoints.native import default_preprocessing
from vitviz.pipeline.analysis import analyze
from vitviz.pipeline.head_effects import head_effects
from vitviz.pipeline.interventions import head_layout, holding

TARGET_KNOCK = 1.3
TARGET_EFFECTS_CPU = 0.6  # of L·H bare forwards
TARGET_EFFECTS_GPU = 15.0  # bare forwards
TARGET_MEMORY = 1.5
LABELS = {
    "a": "(a) bare forward (baseline)",
    "p": "(p) plain analysis",
    "k": "(k) analysis, one head knocked out",
    "e": "(e) every single-head effect",
}


def build(variant: str, quick: bool, device: torch.device) -> LoadedModel:
    torch.manual_seed(0)
    overrides = dict(image_size=32, patch_size=8, dim=32, depth=2, heads=2) if quick else {}
    model = create_model("vit-tiny" if quick else variant, **overrides)
    model = model.eval().to(device)
    names = [f"class {i}" for i in range(model.config.num_classes)]
    return LoadedModel(
        model=model,
        class_names=names,
        preprocessing=default_preprocessing(model.config),
        family="vitviz",
    )


def _status_mib(key: str) -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith(key + ":"))


def child(case: str, variant: str, quick: bool, device: torch.device, batch: int | None) -> None:
    """Run one case (p or e) on a model built here; print as JSON (MiB) its peak above the
    memory once the model is built (``growth``), the whole peak and that memory."""
    on_gpu = device.type == "cuda"
    before = torch.cuda.memory_allocated(device) if on_gpu else 0
    loaded = build(variant, quick, device)
    size = loaded.model.config.image_size
    x = torch.randn(3, *size, generator=torch.Generator().manual_seed(1)).to(device)
    _ = loaded.kind  # resolved before the reset
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
        head_effects(loaded, x, batch=batch)
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


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    add_device_option(p)
    p.add_argument("--variant", default="vit-base", help="vit-tiny, vit-small, vit-base, …")
    p.add_argument("--batch", type=int, default=None, help="heads per pass (default: by device)")
    p.add_argument("--child", choices=["p", "e"], default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    apply_threads(args.threads)
    device = bench_device(args.device)
    if args.child:
        child(args.child, args.variant, args.quick, device, args.batch)
        return 0
    memory = {case: measured(case, args) for case in ("p", "e")}
    repeats = args.repeats or (2 if args.quick else 5)
    warmup = args.warmup if args.warmup is not None else 1
    loaded = build(args.variant, args.quick, device)
    model, kind = loaded.model, loaded.kind
    size = model.config.image_size
    x = torch.randn(3, *size, generator=torch.Generator().manual_seed(1)).to(device)
    layout = head_layout(kind, model, x[None])
    L, H = layout.layers, max(layout.heads)
    head = (L // 2, H // 2)
    effects = head_effects(loaded, x, batch=args.batch)

    wrong = []
    with holding(layout, {head: None}):
        knocked = kind.analyze(loaded, x).logits
    c = effects.target
    want = float(effects.logits[c] - knocked[c].cpu())
    if abs(float(effects.effect[head]) - want) > 1e-3 * (1 + abs(want)):
        wrong.append(f"head {head}: effect {float(effects.effect[head])} != {want}")

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
        "e": synced(lambda: head_effects(loaded, x, batch=args.batch), device),
    }
    stats = {k: Stats.of(v) for k, v in interleaved(cases, repeats, warmup).items()}
    base = stats["a"].median
    on_gpu = device.type == "cuda"
    effects_ratio = stats["e"].median / (base if on_gpu else base * L * H)
    knock_ratio = stats["k"].median / base
    effects_name = "(e) effects / bare forward" if on_gpu else f"(e) effects / ({L}·{H} forwards)"
    effects_target = TARGET_EFFECTS_GPU if on_gpu else TARGET_EFFECTS_CPU
    checks = {
        "k": Check("(k) knocked-out analysis / bare forward", knock_ratio, TARGET_KNOCK, True),
        "e": Check(effects_name, effects_ratio, effects_target, True),
    }
    memory_ratio = memory["e"]["growth"] / memory["p"]["growth"]
    checks["m"] = Check("(m) memory of the effects / of one analysis", memory_ratio, TARGET_MEMORY,
                        True)  # fmt: skip
    rows = []
    for key, s in stats.items():
        check = checks.get(key)
        ratio = s.median / base
        if key == "e" and not on_gpu:
            ratio_cell = f"{ratio:.2f} ({effects_ratio:.2f} of {L * H})"
        else:
            ratio_cell = "1.00" if key == "a" else f"{ratio:.2f}"
        rows.append([
            LABELS[key], fmt_seconds(s.median), fmt_seconds(s.p90), fmt_seconds(s.min),
            ratio_cell, check.target if check else ("baseline" if key == "a" else "info"),
            check.verdict if check else "",
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
    what = "peak allocated" if on_gpu else "peak resident (VmHWM)"
    whole = "all allocated memory" if on_gpu else "the process's, Python and torch too"
    print(f"memory, each case in a fresh process: {what} above what it was once the model was "
          f"built ({memory['p']['model']:.0f} MiB), and the whole peak ({whole}), MiB")  # fmt: skip
    print_table(
        ["case", "peak growth", "whole peak", "× (p)", "target", ""],
        [
            [LABELS["p"], f"{memory['p']['growth']:.0f}", f"{memory['p']['total']:.0f}", "1.00",
             "baseline", ""],
            [LABELS["e"], f"{memory['e']['growth']:.0f}", f"{memory['e']['total']:.0f}",
             f"{memory_ratio:.2f}", checks["m"].target, checks["m"].verdict],
        ],
    )  # fmt: skip
    return finish(list(checks.values()), args.no_check, wrong)


if __name__ == "__main__":
    sys.exit(main())
