"""What looking inside costs: a full analysis against the bare fused forward pass.

ViT-B/16 at 224 with random weights on the CPU (or ``--device cuda|mps``; ``--model``,
``--image-size``, ``--patch-size`` for e.g. ViT-L/16 at 384 or ViT-L/14 at 518), batch 1, one
process, measured in turns (GPU work synchronised before each time is taken):

  (a) baseline: ``model(x)``, the fused SDPA forward under ``torch.inference_mode()``;
  (b) ``analyze(loaded, x)`` + ``rollout()`` + ``all_attention_maps()``: attention capture,
      token norms, the rollout map and every layer's CLS maps (the head statistics are made
      from the kept attention when first read: the info row (b+s) reads them too, as the
      window does);
  (c) ``analyze(loaded, x, gradients=True)`` + ``relevance()``: relevance asked for with the
      analysis (one forward with autograd + one backward to the attention).

Targets: median(b) / median(a) ≤ 1.15 and median(c) / median(a) ≤ 3.5 on the CPU; on CUDA
≤ 1.3 and ≤ 3, and ViT-L/14 at 518 (``--model vit-large --image-size 518 --patch-size 14``)
takes ≤ 100 ms for (b). Info rows: (b) from a
PIL photo-sized image (preprocessing included), the capture forward alone, and (c') relevance
asked for after a plain analysis (a second forward + backward), and (q) a query change on an
analysis made (the window's click: rollout and relevance rows + every raw map of a patch).

    .venv/bin/python benchmarks/analysis_overhead.py [--quick] [--no-check] [--repeats N]
        [--device cpu|cuda|mps] [--model vit-large] [--image-size 384] [--patch-size 16]
        [--model eva02-tiny]  (timm's EVA-02 Ti/14 at 224: rotary positions, SwiGLU; needs timm)
        [--model beit-base]   (timm's BEiT-B/16 at 224: a relative position bias per layer)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import numpy as np
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
    peak_rss_mib,
    print_timed_report,
    read_args,
    repeats_and_warmup,
    synced,
    target_cells,
    timing_cells,
)
from _models import random_vit
from PIL import Image

from vitviz.blocks import VARIANT_NAMES
from vitviz.checkpoints.loaded import LoadedModel
from vitviz.pipeline.analysis import analyze

TARGET_ANALYSIS = 1.15  # (b) / (a), at most
TARGET_RELEVANCE = 3.5  # (c) / (a), at most
TARGET_ANALYSIS_CUDA = 1.3  # the same on a CUDA GPU, where batch 1 is bound by kernel launches
TARGET_RELEVANCE_CUDA = 3.0
TARGET_LARGE_518_MS = 100.0  # (b) of ViT-L/14 at 518 on CUDA, milliseconds, at most
PHOTO_SIZE = (500, 375)  # (W, H) of the PIL input: a typical ImageNet photo


# Library architectures measured as a user opens them: timm builds the model with
# random weights, saves its folder (config.json + model.safetensors), vitviz loads that.
TIMM_MODELS = {
    "eva02-tiny": "eva02_tiny_patch14_224",
    "eva02-small": "eva02_small_patch14_224",
    "beit-base": "beit_base_patch16_224",  # relative position bias per layer
}


def build_timm(arch: str, seed: int = 0) -> LoadedModel:
    """timm's ``arch`` (random weights, seeded) opened by vitviz from its timm folder."""
    import tempfile
    from pathlib import Path

    import timm
    from timm.models import save_for_hf

    from vitviz.checkpoints import load_checkpoint

    torch.manual_seed(seed)
    model = timm.create_model(arch, pretrained=False, num_classes=1000).eval()
    with tempfile.TemporaryDirectory() as tmp:
        save_for_hf(model, Path(tmp) / arch, safe_serialization=True)
        return load_checkpoint(Path(tmp) / arch)


def size_overrides(args: argparse.Namespace) -> dict[str, int]:
    """The config fields ``--image-size`` and ``--patch-size`` set (those given)."""
    given = (("image_size", args.image_size), ("patch_size", args.patch_size))
    return {k: v for k, v in given if v is not None}


def build(variant: str, seed: int = 0, **overrides: object) -> LoadedModel:
    """A randomly initialised model of ``variant`` in eval mode, as the window would hold it;
    ``overrides``: config fields (image_size, patch_size)."""
    if variant in TIMM_MODELS:
        return build_timm(TIMM_MODELS[variant], seed)
    return random_vit(variant, seed, **overrides)


def make_cases(
    loaded: LoadedModel, x: torch.Tensor, photo: Image.Image
) -> dict[str, Callable[[], object]]:
    """The measured calls by row key; ``x`` is a normalised (1, 3, H, W) input on the host
    (the analysis moves it; the bare forward gets it on the device already)."""
    model = loaded.model
    dev = next(model.parameters()).device
    x_dev = x.to(dev)
    made = analyze(loaded, x[0], gradients=True)
    made.rollout(), made.relevance()  # prepared once, as after the first view
    gh, gw = made.grid
    clicks = [(r, c) for r in range(gh) for c in range(gw)]
    clicked = iter(range(10**9))

    def bare_forward() -> object:
        with torch.inference_mode():
            return model(x_dev)

    def query_change() -> object:
        patch = clicks[next(clicked) % len(clicks)]
        return made.rollout(patch), made.relevance(None, patch), made.host_query_maps(patch)

    def analysis_maps() -> object:
        analysis = analyze(loaded, x[0])
        return analysis.rollout(), analysis.all_attention_maps()

    def analysis_maps_stats() -> object:
        analysis = analyze(loaded, x[0])
        return analysis.rollout(), analysis.all_attention_maps(), analysis.mean_distance

    def analysis_relevance() -> object:
        return analyze(loaded, x[0], gradients=True).relevance()

    def analysis_then_relevance() -> object:
        return analyze(loaded, x[0]).relevance()

    def analysis_maps_photo() -> object:
        analysis = analyze(loaded, photo)
        return analysis.rollout(), analysis.all_attention_maps()

    def capture_forward() -> object:
        with torch.inference_mode():
            return model.forward_explained(x_dev, capture_attention=True, hidden_states=True)

    cases = {
        "a": bare_forward,
        "b": analysis_maps,
        "b-stats": analysis_maps_stats,
        "c": analysis_relevance,
        "c-late": analysis_then_relevance,
        "b-photo": analysis_maps_photo,
        "capture": capture_forward,
        "query": query_change,
    }
    return {k: synced(fn, dev) for k, fn in cases.items()}


LABELS = {
    "a": "(a) model(x), fused SDPA, inference_mode",
    "b": "(b) analyze + rollout + all CLS maps",
    "b-stats": "(b+s) as (b), reading the head statistics",
    "c": "(c) analyze(gradients=True) + relevance",
    "c-late": "(c') analyze, then relevance on request",
    "b-photo": "(b') as (b), from a {w}×{h} PIL image",
    "capture": "forward_explained(capture, hidden) only",
    "query": "(q) query change: rollout + relevance + raw maps",
}


def check_results(loaded: LoadedModel, x: torch.Tensor) -> list[str]:
    """The analysis must see what the fused forward sees: same logits, every layer captured."""
    wrong = []
    model = loaded.model
    with torch.inference_mode():
        fused = model(x.to(next(model.parameters()).device))[0].cpu()
    analysis = analyze(loaded, x[0])
    diff = float((analysis.logits - fused).abs().max())
    if diff > 1e-4:
        wrong.append(f"analysis logits differ from the fused forward by {diff:.2e}")
    if analysis.num_layers != model.config.depth:
        wrong.append(f"{analysis.num_layers} layers captured of {model.config.depth}")
    maps = analysis.all_attention_maps()
    if not torch.isfinite(maps).all() or not torch.isfinite(analysis.relevance()).all():
        wrong.append("maps with non-finite values")
    return wrong


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument(
        "--model",
        choices=(*VARIANT_NAMES, *TIMM_MODELS),
        default=None,
        help="variant to measure (default vit-base; cifar10-tutorial with --quick); "
        "eva02-tiny / eva02-small / beit-base: timm's EVA-02 or BEiT with random weights, "
        "opened from its folder",
    )
    p.add_argument("--image-size", type=int, default=None, help="input side (the variant's)")
    p.add_argument("--patch-size", type=int, default=None, help="patch side (the variant's)")
    add_device_option(p)
    args = read_args(p, argv)
    device = bench_device(args.device)
    variant = args.model or ("cifar10-tutorial" if args.quick else "vit-base")
    overrides = size_overrides(args)
    repeats, warmup = repeats_and_warmup(args, quick=(3, 1), full=(15, 2))

    loaded = build(variant, **overrides)
    loaded.model.to(device)
    cfg = loaded.config
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(1, cfg.in_channels, *cfg.image_size, generator=gen)
    rng = np.random.default_rng(2)
    w, h = PHOTO_SIZE
    photo = Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), "RGB")

    wrong = check_results(loaded, x)
    cases = make_cases(loaded, x, photo)
    times = interleaved(cases, repeats, warmup)
    stats = {k: Stats.of(v) for k, v in times.items()}

    base = stats["a"].median
    cuda = device.type == "cuda"
    checks = {
        "b": Check(
            "(b) analysis / bare forward",
            stats["b"].median / base,
            TARGET_ANALYSIS_CUDA if cuda else TARGET_ANALYSIS,
            True,
        ),
        "c": Check(
            "(c) relevance / bare forward",
            stats["c"].median / base,
            TARGET_RELEVANCE_CUDA if cuda else TARGET_RELEVANCE,
            True,
        ),
    }
    large_518 = variant == "vit-large" and cfg.image_size[0] == 518 and cfg.patch_size == 14
    absolute = (
        Check("(b) ViT-L/14 at 518, ms", stats["b"].median * 1e3, TARGET_LARGE_518_MS, True)
        if cuda and large_518
        else None
    )
    rows = []
    for key, s in stats.items():
        check = checks.get(key)
        rows.append(
            [
                *timing_cells(LABELS[key].format(w=w, h=h), s),
                "1.00" if key == "a" else f"{s.median / base:.2f}",
                *target_cells(check, baseline=key == "a"),
            ]
        )

    print_timed_report(
        f"Analysis overhead: {variant} at {cfg.image_size[0]}×{cfg.image_size[1]}, "
        f"patch {cfg.patch_size}, {cfg.depth} layers × {cfg.heads} heads, {cfg.num_classes} "
        f"classes, batch 1, {device.type}",
        ["case", "median", "p90", "min", "× (a)", "target", "verdict"],
        rows,
        repeats,
        warmup,
        args.quick,
        device_line=f"device: {device_name(device)}",
    )
    print()
    if absolute is not None:
        print(f"{absolute.name}: {absolute.ratio:.1f} (target {absolute.target})", absolute.verdict)
    print(f"peak RSS: {peak_rss_mib():.0f} MiB")
    every = [*checks.values(), *([absolute] if absolute is not None else [])]
    return finish(every, args.no_check, wrong)


if __name__ == "__main__":
    sys.exit(main())
