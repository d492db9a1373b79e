"""Opening a ViT-B/16 checkpoint: vitviz's load_checkpoint against the bare library load.

Checkpoints: torchvision's ``vit_b_16`` with random weights, saved as a state dict with
``torch.save`` (.pth) and with safetensors' ``save_file`` (.safetensors), 1000 classes.

- baseline: ``torch.load(weights_only=True)`` / ``safetensors.torch.load_file``, then
  ``load_state_dict`` into a torchvision ``vit_b_16`` built beforehand (its construction is not
  timed, which favours the baseline);
- vitviz: ``load_checkpoint(path)``: safe read (``torch.load(mmap=True)`` / safe_open), family
  detection, conversion to the one model (renames only for torchvision), model built on the meta
  device and the tensors assigned (no copy), class names and preprocessing.

Times are medians of interleaved repeats in one process. Peak RSS is measured in a fresh
subprocess per case (model construction included for both), reported as MiB above the process
after its imports and as copies of the weights (file size) at the peak. The loaded model's
logits must match torchvision's within 1e-4. Targets: time ratio ≤ 1.5 for both formats; at
most 1.25 copies of the weights at vitviz's peak. (With mmap, .pth weights are paged in when
first used, not while opening.)

    .venv/bin/python benchmarks/load.py [--quick] [--no-check] [--repeats N]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from _common import (
    Check,
    Stats,
    environment,
    finish,
    fmt_seconds,
    interleaved,
    parser,
    peak_rss_mib,
    print_table,
)

TIME_TARGET = 1.5  # vitviz / baseline, at most
COPIES_TARGET = 1.25  # weights copies above the imports at vitviz's peak, at most
LOGIT_ATOL = 1e-4
QUICK = dict(image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=64, mlp_dim=128)


def reference_model(quick: bool) -> torch.nn.Module:
    """torchvision's vit_b_16 (or a tiny torchvision ViT in --quick mode), eval mode."""
    from torchvision.models import vit_b_16
    from torchvision.models.vision_transformer import VisionTransformer

    model = VisionTransformer(**QUICK) if quick else vit_b_16()
    return model.eval()


def write_checkpoints(folder: Path, quick: bool) -> tuple[Path, Path, torch.nn.Module]:
    from safetensors.torch import save_file

    torch.manual_seed(0)
    model = reference_model(quick)
    with torch.no_grad():  # torchvision zero-initialises the head: give it real values
        model.heads.head.weight.normal_(std=0.02)
    state = model.state_dict()
    pth, st = folder / "vit_b_16.pth", folder / "vit_b_16.safetensors"
    torch.save(state, pth)
    save_file({k: v.contiguous() for k, v in state.items()}, str(st))
    if quick:  # a width torchvision has no named model for: the sidecar gives the heads
        for p in (pth, st):
            p.with_name(p.name + ".vitviz.json").write_text(json.dumps({"heads": 4}))
    return pth, st, model


def baseline_load(path: Path, model: torch.nn.Module) -> None:
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        state = load_file(str(path))
    else:
        state = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(state)


def vitviz_load(path: Path) -> object:
    from vitviz.checkpoints import load_checkpoint

    return load_checkpoint(path)


def _status_mib(field: str) -> float | None:
    """VmRSS / VmHWM of this process from /proc (Linux), MiB; None elsewhere."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def child(mode: str, path: Path, quick: bool) -> None:
    """Subprocess: RSS before and at the peak of one way of opening ``path`` (JSON)."""
    from torchvision.models import vision_transformer  # noqa: F401

    import vitviz.checkpoints  # noqa: F401 - imports count for both, before the measurement

    try:  # reset the peak so the imports' transient peak does not hide the load's
        Path("/proc/self/clear_refs").write_text("5")
        before, peak_of = _status_mib("VmRSS"), lambda: _status_mib("VmHWM")
    except OSError:
        before, peak_of = peak_rss_mib(), peak_rss_mib
    if mode == "baseline":
        baseline_load(path, reference_model(quick))
    else:
        vitviz_load(path)
    print(json.dumps({"before": before, "peak": peak_of()}))


def measure_rss(mode: str, path: Path, quick: bool) -> dict[str, float]:
    args = [sys.executable, __file__, "--child", mode, str(path)] + (["--quick"] if quick else [])
    out = subprocess.run(args, capture_output=True, text=True, check=True, timeout=600)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--child", nargs=2, metavar=("MODE", "PATH"), help=argparse_hidden())
    args = p.parse_args()
    if args.child:
        child(args.child[0], Path(args.child[1]), args.quick)
        return 0
    repeats = args.repeats or (2 if args.quick else 7)
    warmup = args.warmup if args.warmup is not None else 1
    print(
        f"# load_checkpoint vs torch.load/safetensors + load_state_dict "
        f"({'tiny torchvision ViT, --quick' if args.quick else 'torchvision vit_b_16'})"
    )
    print(environment())
    wrong: list[str] = []
    checks: list[Check] = []
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        pth, st, reference = write_checkpoints(Path(tmp), args.quick)
        size_mib = pth.stat().st_size / 2**20
        target = reference_model(args.quick)
        x = torch.randn(
            1, 3, *(2 * [32 if args.quick else 224]), generator=torch.Generator().manual_seed(0)
        )
        with torch.no_grad():
            expected = reference(x)
        for path in (pth, st):
            fmt = path.suffix
            loaded = vitviz_load(path)
            with torch.no_grad():
                diff = float((loaded.model(x) - expected).abs().max())  # type: ignore[attr-defined]
            if diff > LOGIT_ATOL:
                wrong.append(f"{fmt}: logits differ from torchvision's by {diff:.3g}")
            del loaded
            times = interleaved(
                {
                    "baseline": lambda p=path: baseline_load(p, target),
                    "vitviz": lambda p=path: vitviz_load(p),
                },
                repeats,
                warmup,
            )
            base, ours = Stats.of(times["baseline"]), Stats.of(times["vitviz"])
            measured = not (args.quick and fmt == ".pth")  # two interpreters suffice for a smoke
            modes = ("baseline", "vitviz")
            rss = {
                m: measure_rss(m, path, args.quick) if measured else {"before": 0.0, "peak": 0.0}
                for m in modes
            }
            extra = {m: rss[m]["peak"] - rss[m]["before"] for m in rss}
            ratio = ours.median / base.median
            check = Check(f"time {fmt}", ratio, TIME_TARGET, at_most=True)
            copies = extra["vitviz"] / size_mib
            mem = Check(f"weights copies at peak {fmt}", copies, COPIES_TARGET, at_most=True)
            if not args.quick:
                checks += [check, mem]
            for m, stats in (("baseline", base), ("vitviz", ours)):
                rows.append(
                    [
                        f"{fmt} {m}",
                        fmt_seconds(stats.median),
                        fmt_seconds(stats.p90),
                        f"{ratio:.2f}" if m == "vitviz" else "1.00",
                        *(
                            (
                                f"{rss[m]['peak']:.0f}",
                                f"{extra[m]:.0f}",
                                f"{extra[m] / size_mib:.2f}",
                            )
                            if measured
                            else ("-", "-", "-")
                        ),
                        f"{diff:.1e}" if m == "vitviz" else "",
                        (f"{check.verdict} / {mem.verdict}" if not args.quick else "info")
                        if m == "vitviz"
                        else "baseline",
                    ]
                )
    print(f"weights: {size_mib:.0f} MiB; {repeats} interleaved repeats, {warmup} warm-up")
    print_table(
        [
            "case",
            "median",
            "p90",
            "ratio",
            "peak RSS MiB",
            "above imports MiB",
            "weights copies",
            "max |Δ logit|",
            "verdict",
        ],
        rows,
    )
    print(
        f"targets: time ratio ≤ {TIME_TARGET}, weights copies at vitviz's peak ≤ "
        f"{COPIES_TARGET}; peak RSS: this process {peak_rss_mib():.0f} MiB"
    )
    return finish(checks, args.no_check, wrong)


def argparse_hidden() -> str:
    import argparse

    return argparse.SUPPRESS


if __name__ == "__main__":
    sys.exit(main())
