"""What the feature views and the compare cost (DESIGN §5, §7), against the analysis and the
bare forward pass in the same run.

A randomly initialised vitviz ViT (default vit-base, ViT-B/16 at 224; ``--model`` for another
variant, cifar10-tutorial with --quick) on the CPU, batch 1, one process, cases in turns:

  (a) baseline: ``model(x)``, the fused forward under ``torch.inference_mode()``;
  (b) ``analyze(loaded, x)`` + ``rollout()``: the analysis the window makes of an image;
  (f) as (b), then the feature maps of that analysis: ``token-norm``, ``similarity``, ``pca``
      and the logit lens from the block outputs its pass kept (what the Features tab and the
      chart ask);
  (q) a similarity query change on an analysis whose features are made (the engine's part
      of a click in the Features tab);
  (c) compare: two models' analyses (A and B, same shape) + ``compare_analyses`` (head
      similarity, both rollouts).

Targets: (f) / (b) ≤ 1.05; (q) ≤ 5 ms; (c) / (a) ≤ 2.1.

    .venv/bin/python benchmarks/features.py [--quick] [--no-check] [--repeats N] [--model vit-small]
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
    print_timed_report,
    read_args,
    repeats_and_warmup,
    timing_cells,
)
from _models import random_vit

from vitviz.blocks import VARIANT_NAMES
from vitviz.checkpoints.loaded import LoadedModel
from vitviz.explain.feature_methods import (
    analysis_logit_lens,
    feature_pass,
    pca_method,
    similarity_method,
    token_norm_method,
)
from vitviz.pipeline.analysis import analyze
from vitviz.pipeline.compare import compare_analyses

TARGET_FEATURES = 1.05  # (f) / (b), at most
TARGET_QUERY_MS = 5.0  # (q), milliseconds, at most
TARGET_COMPARE = 2.1  # (c) / (a), at most


def build(variant: str, seed: int) -> LoadedModel:
    return random_vit(variant, seed)


def features_of(analysis: object) -> object:
    """Every feature view of ``analysis`` (its first read makes the intermediates pass)."""
    layer = {"layer": -1}
    return (
        token_norm_method(analysis, None, None, layer),
        similarity_method(analysis, None, None, layer),
        pca_method(analysis, None, None, {"foreground": 0.0}),
        analysis_logit_lens(analysis),
    )


def make_cases(a: LoadedModel, b: LoadedModel, x: torch.Tensor) -> dict[str, Callable[[], object]]:
    made = analyze(a, x[0])
    features_of(made)
    gh, gw = made.grid
    clicks = [(r, c) for r in range(gh) for c in range(gw)]
    clicked = iter(range(10**9))

    def bare_forward() -> object:
        with torch.inference_mode():
            return a.model(x)

    def analysis() -> object:
        return analyze(a, x[0]).rollout()

    def analysis_features() -> object:
        fresh = analyze(a, x[0])
        return fresh.rollout(), features_of(fresh)

    def query_change() -> object:
        return similarity_method(made, clicks[next(clicked) % len(clicks)], None, {"layer": -1})

    def compare() -> object:
        one, two = analyze(a, x[0]), analyze(b, x[0])
        return compare_analyses(a, one, b, two)

    return {"a": bare_forward, "b": analysis, "f": analysis_features, "q": query_change,
            "c": compare}  # fmt: skip


LABELS = {
    "a": "(a) model(x), fused, inference_mode",
    "b": "(b) analyze + rollout",
    "f": "(f) as (b) + token-norm, similarity, pca, logit lens",
    "q": "(q) similarity query change (features made)",
    "c": "(c) compare: two analyses + head similarity + both rollouts",
}


def check_results(a: LoadedModel, x: torch.Tensor) -> list[str]:
    wrong = []
    made = analyze(a, x[0])
    lens = analysis_logit_lens(made)
    if float((lens[-1] - made.probs).abs().max()) > 1e-4:
        wrong.append("the logit lens's last row is not the model's prediction")
    if len(feature_pass(made).blocks) != a.model.config.depth:
        wrong.append("the intermediates miss blocks")
    sim = compare_analyses(a, made, a, analyze(a, x[0])).head_similarity
    if float(abs(sim - 1.0).max()) > 1e-5:
        wrong.append("a model compared with itself is not 1 everywhere")
    return wrong


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--model", choices=VARIANT_NAMES, default=None, help="default vit-base")
    args = read_args(p, argv)
    variant = args.model or ("cifar10-tutorial" if args.quick else "vit-base")
    repeats, warmup = repeats_and_warmup(args, quick=(3, 1), full=(11, 1))
    a, b = build(variant, 0), build(variant, 1)
    cfg = a.model.config
    x = torch.randn(1, cfg.in_channels, *cfg.image_size, generator=torch.Generator().manual_seed(1))
    wrong = check_results(a, x)
    times = interleaved(make_cases(a, b, x), repeats, warmup)
    stats = {k: Stats.of(v) for k, v in times.items()}
    base, analysis = stats["a"].median, stats["b"].median
    checks = {
        "f": Check("(f) features / analysis", stats["f"].median / analysis, TARGET_FEATURES, True),
        "q": Check("(q) query change, ms", stats["q"].median * 1e3, TARGET_QUERY_MS, True),
        "c": Check("(c) compare / bare forward", stats["c"].median / base, TARGET_COMPARE, True),
    }
    rows = []
    for key, s in stats.items():
        check = checks.get(key)
        rows.append([
            *timing_cells(LABELS[key], s),
            "1.00" if key == "a" else f"{s.median / base:.2f}",
            f"{s.median / analysis:.2f}",
            check.target + (" ms" if key == "q" else "") if check else (
                "baseline" if key in "ab" else "info"),
            check.verdict if check else "",
        ])  # fmt: skip
    print_timed_report(
        f"Feature views and compare: {variant} at {cfg.image_size[0]}×{cfg.image_size[1]}, "
        f"patch {cfg.patch_size}, {cfg.depth} layers × {cfg.heads} heads, batch 1, cpu",
        ["case", "median", "p90", "min", "× (a)", "× (b)", "target", "verdict"],
        rows,
        repeats,
        warmup,
        args.quick,
    )
    return finish(list(checks.values()), args.no_check, wrong)


if __name__ == "__main__":
    sys.exit(main())
