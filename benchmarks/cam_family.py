"""The CAM family (DESIGN §5): each method's cost relative to one bare forward pass.

Baseline: one forward pass of the model, no gradient, batch 1 (``model(x)``), timed in the same
run, in turns with the methods. Each method runs as the table runs it on the default layer (the
last block's norm1): the gradient-weighted ones one forward pass with the layer's tokens kept
and one backward pass back to that layer only; Eigen-CAM one forward pass; Score-CAM and
Ablation-CAM 1 + C forward passes (C the layer's channels), 16 at a time. No target: the table
says what a map costs (docs/methods.md states it).

    .venv/bin/python benchmarks/cam_family.py [--quick] [--model tiny|vit-ti|vit-s|vit-b]
        [--fast-only] [--repeats N] [--threads N]
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch
from _common import (
    Stats,
    apply_threads,
    environment,
    finish,
    fmt_seconds,
    interleaved,
    parser,
    peak_rss_mib,
    print_table,
)

from vitviz.blocks import VisionTransformer, ViTConfig
from vitviz.explain.ablationcam import ablation_cam
from vitviz.explain.cam_layer import layer_pass
from vitviz.explain.eigen_gradcam import eigen_grad_cam
from vitviz.explain.eigencam import eigen_cam
from vitviz.explain.gradcam import grad_cam
from vitviz.explain.gradcam_elementwise import gradcam_elementwise
from vitviz.explain.gradcam_plusplus import gradcam_plus_plus
from vitviz.explain.hirescam import hires_cam
from vitviz.explain.layercam import layer_cam
from vitviz.explain.scorecam import score_cam
from vitviz.explain.xgradcam import xgrad_cam
from vitviz.kinds.vit import KIND as VIT

MODELS = {  # name: (image, patch, dim, depth, heads)
    "tiny": (32, 8, 32, 2, 2),
    "vit-ti": (224, 16, 192, 12, 3),
    "vit-s": (224, 16, 384, 12, 6),  # mid size: Score- and Ablation-CAM finish in minutes
    "vit-b": (224, 16, 768, 12, 12),
}
GRADIENT_CAMS = {
    "gradcam": grad_cam,
    "hirescam": hires_cam,
    "gradcam-plusplus": gradcam_plus_plus,
    "xgradcam": xgrad_cam,
    "layercam": layer_cam,
    "gradcam-elementwise": gradcam_elementwise,
    "eigen-gradcam": eigen_grad_cam,
}
SLOW = ("scorecam", "ablationcam")  # 1 + C forward passes: timed fewer times


def _model(name: str) -> tuple[VisionTransformer, torch.Tensor]:
    size, patch, dim, depth, heads = MODELS[name]
    torch.manual_seed(0)
    config = ViTConfig(image_size=size, patch_size=patch, dim=dim, depth=depth, heads=heads,
                       num_classes=1000)  # fmt: skip
    model = VisionTransformer(config).eval()
    x = torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(1))
    return model, x


def _cases(model: VisionTransformer, x: torch.Tensor) -> dict[str, Callable[[], torch.Tensor]]:
    def bare() -> torch.Tensor:
        with torch.no_grad():
            return model(x)

    def gradient(formula: Callable) -> Callable[[], torch.Tensor]:
        def run() -> torch.Tensor:
            lp = layer_pass(VIT, model, x, "auto", 0)
            return formula(lp.activations, lp.gradients)

        return run

    cases: dict[str, Callable[[], torch.Tensor]] = {"bare forward": bare}
    cases.update({name: gradient(f) for name, f in GRADIENT_CAMS.items()})
    cases["eigencam"] = lambda: eigen_cam(
        layer_pass(VIT, model, x, "auto", gradients=False).activations
    )
    cases["scorecam"] = lambda: score_cam(VIT, model, x, "auto", 0)
    cases["ablationcam"] = lambda: ablation_cam(VIT, model, x, "auto", 0)
    return cases


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--model", choices=list(MODELS), default="vit-b")
    p.add_argument(
        "--fast-only",
        action="store_true",
        help="leave out Score-CAM and Ablation-CAM (1 + C passes each: minutes on a ViT-B)",
    )
    args = p.parse_args(argv)
    apply_threads(args.threads)
    name = "tiny" if args.quick else args.model
    repeats = 2 if args.quick else (args.repeats or 5)
    model, x = _model(name)
    cases = _cases(model, x)
    fast = {k: f for k, f in cases.items() if k not in SLOW}
    times = interleaved(fast, repeats=repeats, warmup=1)
    if args.fast_only:
        cases = fast
    else:
        slow = {"baseline": cases["bare forward"]} | {k: cases[k] for k in SLOW}
        slow_times = interleaved(slow, 1, 0)
        times["bare forward"] += slow_times.pop("baseline")  # the baseline's runs pooled
        times.update(slow_times)
    wrong = []
    for k, fn in cases.items():
        out = fn()
        if not torch.isfinite(out).all():
            wrong.append(f"{k} gave a non-finite map")
    size, patch, dim, depth, heads = MODELS[name]
    print(f"device: cpu ({environment()})")
    print(f"model: {name}, {depth} blocks of width {dim}, {heads} heads, {size}×{size}, "
          f"patch {patch}; layer: the last block's norm1 (C = {dim})")  # fmt: skip
    base = Stats.of(times["bare forward"]).median
    rows = []
    for k in cases:
        s = Stats.of(times[k])
        passes = f"1 + {dim}" if k in SLOW else ("1 + backward" if k in GRADIENT_CAMS else "1")
        rows.append([k, passes, fmt_seconds(s.median), f"{s.median / base:.2f}", str(s.n)])
    print_table(["method", "forward passes", "median", "× bare forward", "runs"], rows)
    print(f"peak RSS: {peak_rss_mib():.0f} MiB")
    return finish([], args.no_check, wrong)


if __name__ == "__main__":
    sys.exit(main())
