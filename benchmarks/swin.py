"""What looking inside a Swin costs: analysis with rollout against the bare fused forward pass.

Swin-T (widths 96-768, depths 2-2-6-2, window 7) at 224 with random weights, batch 1, measured
in turns on one device (``--device``, default cpu):

  (a) baseline: ``model(x)``, the fused SDPA forward under ``torch.inference_mode()``;
  (b) ``analyze_swin(model, x)`` + ``rollout()``: every block's window attention captured, the
      windowed rollout over the first stage's grid;
  (c) ``analyze_swin(model, x, gradients=True)`` + ``gradient_rollout()`` (info);
  (q) a query change: the clicked point's row of Â_b in every block (the window's big map at
      each block's resolution) and the rollout from that token (absolute target).

  (m) memory: what the model and one analysis with rollout add to the process (resident memory
      growth on the CPU, read from /proc before the model is built and the peak after; peak
      allocated memory on a GPU), against the weights plus the captured attention.

Targets: median(b) / median(a) ≤ 1.3 on the CPU (≤ 1.5 on a GPU); median(q) ≤ 20 ms;
(m) ≤ 1.5 × (weights + captured attention).

    .venv/bin/python benchmarks/swin.py [--quick] [--no-check] [--repeats N] [--device cuda]
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch
from _common import (
    Check,
    Stats,
    finish,
    interleaved,
    parser,
    peak_rss_mib,
    print_timed_report,
    read_args,
    repeats_and_warmup,
    timing_cells,
)

from vitviz.kinds.swin.analysis import SwinAnalysis, analyze_swin
from vitviz.kinds.swin.attention import query_row
from vitviz.kinds.swin.config import SwinConfig
from vitviz.kinds.swin.network import SwinTransformer

TARGET_CPU = 1.3  # (b) / (a), at most
TARGET_GPU = 1.5
TARGET_QUERY_S = 0.020  # (q), seconds, at most
TARGET_MEMORY = 1.5  # (m) / (weights + captured attention), at most
SWIN_T = SwinConfig()  # 224, patch 4, 96-192-384-768, depths 2-2-6-2, heads 3-6-12-24, window 7
QUICK = SwinConfig(
    image_size=(64, 64), dims=(24, 48), depths=(2, 2), heads=(2, 4), window_sizes=(4, 4)
)


def resident_mib() -> float | None:
    """This process's resident memory now (Linux /proc), MiB; None where it can't be read."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    import os

    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def build(config: SwinConfig, device: torch.device, seed: int = 0) -> SwinTransformer:
    torch.manual_seed(seed)
    return SwinTransformer(config).eval().to(device)


def query_change(analysis: SwinAnalysis, point: tuple[float, float]) -> list[torch.Tensor]:
    """What a click at ``point`` (fractions of the image height, width) recomputes: the token
    under it in every block, that token's row of Â_b, and the rollout from the last stage's
    token there."""
    rows = []
    for attn, layout in zip(analysis.attentions, analysis.layouts, strict=True):
        H, W = layout.grid
        token = min(int(point[0] * H), H - 1) * W + min(int(point[1] * W), W - 1)
        rows.append(query_row(attn, layout, token))
    H, W = analysis.stage_grids[-1]
    last = min(int(point[0] * H), H - 1) * W + min(int(point[1] * W), W - 1)
    rows.append(analysis.rollout(query=last))
    return rows


def make_cases(
    model: SwinTransformer, x: torch.Tensor, analysis: SwinAnalysis, sync: Callable[[], None]
) -> dict[str, Callable[[], object]]:
    def bare_forward() -> object:
        with torch.inference_mode():
            out = model(x)
        sync()
        return out

    def analysis_rollout() -> object:
        out = analyze_swin(model, x[0]).rollout()
        sync()
        return out

    def gradient_rollout() -> object:
        out = analyze_swin(model, x[0], gradients=True).gradient_rollout()
        sync()
        return out

    def query() -> object:
        out = query_change(analysis, (0.3, 0.6))
        sync()
        return out

    return {"a": bare_forward, "b": analysis_rollout, "c": gradient_rollout, "q": query}


LABELS = {
    "a": "(a) model(x), fused SDPA, inference_mode",
    "b": "(b) analyze_swin + rollout",
    "c": "(c) analyze_swin(gradients=True) + gradient rollout",
    "q": "(q) query change: rows of Â_b in every block + rollout",
}


def check_results(model: SwinTransformer, x: torch.Tensor, analysis: SwinAnalysis) -> list[str]:
    """The analysis must see what the fused forward sees: same logits, every block captured."""
    wrong = []
    with torch.inference_mode():
        fused = model(x)[0]
    diff = float((analysis.logits - fused).abs().max())
    if diff > 1e-4:
        wrong.append(f"analysis logits differ from the fused forward by {diff:.2e}")
    if len(analysis.attentions) != model.config.depth:
        wrong.append(f"{len(analysis.attentions)} blocks captured of {model.config.depth}")
    maps = [analysis.rollout(), *query_change(analysis, (0.5, 0.5))]
    if not all(bool(torch.isfinite(m).all()) for m in maps):
        wrong.append("maps with non-finite values")
    return wrong


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu", help="torch device to measure on (cpu, cuda, mps)")
    args = read_args(p, argv)
    device = torch.device(args.device)
    config = QUICK if args.quick else SWIN_T
    repeats, warmup = repeats_and_warmup(args, quick=(3, 1), full=(15, 3))

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    gen = torch.Generator().manual_seed(1)
    x = torch.randn(1, config.in_channels, *config.image_size, generator=gen).to(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    before = resident_mib() if device.type == "cpu" else 0.0
    model = build(config, device)
    analysis = analyze_swin(model, x[0])
    analysis.rollout()
    if device.type == "cuda":
        grown: float | None = torch.cuda.max_memory_allocated(device) / 2**20
    else:
        grown = None if before is None else peak_rss_mib() - before
    wrong = check_results(model, x, analysis)
    times = interleaved(make_cases(model, x, analysis, sync), repeats, warmup)
    stats = {k: Stats.of(v) for k, v in times.items()}

    base = stats["a"].median
    target = TARGET_CPU if device.type == "cpu" else TARGET_GPU
    checks = {
        "b": Check("(b) analysis + rollout / bare forward", stats["b"].median / base, target, True),
        "q": Check("(q) query change, seconds", stats["q"].median, TARGET_QUERY_S, True),
    }
    weights = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
    captured = sum(a.numel() * a.element_size() for a in analysis.attentions) / 2**20
    if grown is not None:
        checks["m"] = Check(
            "(m) memory / (weights + attention)", grown / (weights + captured), TARGET_MEMORY, True
        )
    rows = []
    for key, s in stats.items():
        check = checks.get(key)
        target_cell = check.target if check else ("baseline" if key == "a" else "info")
        if key == "q":
            target_cell = f"≤ {TARGET_QUERY_S * 1e3:g} ms"
        rows.append(
            [
                *timing_cells(LABELS[key], s),
                "1.00" if key == "a" else f"{s.median / base:.2f}",
                target_cell,
                check.verdict if check else "",
            ]
        )
    if grown is not None:
        what = "peak allocated" if device.type == "cuda" else "resident growth"
        rows.append(
            [
                f"(m) memory: model + one analysis, {what}",
                f"{grown:.0f} MiB",
                f"{checks['m'].ratio:.2f} × (w + a)",
                "",
                "",
                f"≤ {TARGET_MEMORY:g} × (w + a)",
                checks["m"].verdict,
            ]
        )
    print_timed_report(
        f"Swin analysis overhead: widths {'-'.join(map(str, config.dims))}, depths "
        f"{'-'.join(map(str, config.depths))}, window {config.window_sizes[0]}, at "
        f"{config.image_size[0]}×{config.image_size[1]}, {device}, batch 1",
        ["case", "median", "p90", "min", "× (a)", "target", "verdict"],
        rows,
        repeats,
        warmup,
        args.quick,
    )
    print()
    print(
        f"weights {weights:.1f} MiB, captured attention {captured:.1f} MiB, "
        f"peak RSS: {peak_rss_mib():.0f} MiB"
    )
    return finish(list(checks.values()), args.no_check, wrong)


if __name__ == "__main__":
    sys.exit(main())
