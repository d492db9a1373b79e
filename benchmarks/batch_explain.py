"""Explaining many images: ``vitviz-cli explain`` over a folder in batches against the bare
batched forward pass, images per second.

ViT-B/16 at 224 with random weights (cifar10-tutorial with --quick), on ``--device``, a folder
of generated 500 × 375 JPEG photos-to-be, measured in turns:

  (a) baseline: ``model(x)`` on batches of ``--batch-size`` already preprocessed inputs already
      on the device, fused SDPA, ``inference_mode``;
  (b) what ``vitviz-cli explain FOLDER --batch-size B`` runs
      (``vitviz.cli.explain_batch.explain_many``):
      decoding, preprocessing, the forward pass with attention capture and gradients in
      batches, rollout, gradient rollout and relevance, and every file written (.npz and PNGs,
      by the writer thread while the next batch computes);
  (c) info: ``iter_analyses`` alone, no gradients, nothing written.

Target, on CUDA: (b) ≥ 0.7 × (a) images per second. On the CPU the gradient pass and the
writing cost more than the forward pass itself, so the ratio is shown as info.

    .venv/bin/python benchmarks/batch_explain.py [--quick] [--no-check] [--device cuda]
        [--images N] [--batch-size B]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from _common import (
    Check,
    Stats,
    add_device_option,
    bench_device,
    device_name,
    environment,
    finish,
    interleaved,
    parser,
    peak_rss_mib,
    print_table,
    read_args,
    repeats_and_warmup,
    synced,
)
from _models import random_vit
from PIL import Image

from vitviz.cli.explain_batch import explain_many
from vitviz.imaging import prepare_image
from vitviz.kinds.vit.batch import iter_analyses
from vitviz.pipeline.export import MapSettings

TARGET_CUDA = 0.7  # (b) / (a) images per second, at least, on CUDA
PHOTO = (500, 375)


def write_photos(folder: Path, n: int, size: tuple[int, int]) -> list[Path]:
    rng = np.random.default_rng(0)
    paths = []
    for i in range(n):
        w, h = size
        path = folder / f"img{i:04d}.jpg"
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(path, quality=90)
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    add_device_option(p)
    p.add_argument("--model", default=None, help="variant (default vit-base)")
    p.add_argument("--images", type=int, default=None, help="images in the folder (64)")
    p.add_argument("--batch-size", type=int, default=None, help="images per forward (16)")
    args = read_args(p, argv)
    device = bench_device(args.device)
    variant = args.model or ("cifar10-tutorial" if args.quick else "vit-base")
    n = args.images or (6 if args.quick else 64)
    batch = args.batch_size or (3 if args.quick else 16)
    repeats, warmup = repeats_and_warmup(args, quick=(1, 0), full=(3, 1))

    loaded = random_vit(variant)
    model = loaded.model.to(device)
    work = Path(tempfile.mkdtemp(prefix="vitviz-batch-bench-"))
    size = (64, 48) if args.quick else PHOTO
    images = write_photos(work, n, size)
    patch = model.config.patch_size
    inputs = torch.stack(
        [prepare_image(Image.open(p).convert("RGB"), loaded.preprocessing, patch).tensor
         for p in images]
    ).to(device)  # fmt: skip
    out = work / "out"
    out.mkdir()

    def bare() -> object:
        with torch.inference_mode():
            return [model(inputs[i : i + batch]) for i in range(0, n, batch)]

    def explain() -> object:
        ns = argparse.Namespace(
            images=[work],
            out=out,
            colormap="viridis",
            batch_size=batch,
            attention_dtype="float32",
            bare=False,
            full_size=True,
        )  # fmt: skip  (bare=False: titled PNGs, what `vitviz-cli explain` writes)
        return explain_many(ns, loaded, images, MapSettings())

    def analyses_only() -> object:
        for item in iter_analyses(loaded, images, batch_size=batch):
            assert item.analysis is not None
        return None

    cases = {"a": bare, "b": explain, "c": analyses_only}
    try:
        times = interleaved({k: synced(fn, device) for k, fn in cases.items()}, repeats, warmup)
        written, pngs = sorted(out.glob("*.npz")), len(list(out.glob("*.png")))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    stats = {k: Stats.of(v) for k, v in times.items()}
    wrong = []
    if len(written) != n:
        wrong.append(f"{len(written)} .npz files written for {n} images")
    ips = {k: n / s.median for k, s in stats.items()}
    ratio = ips["b"] / ips["a"]
    check = Check("(b) / (a) images per second", ratio, TARGET_CUDA, at_most=False)
    checks = [check] if device.type == "cuda" else []
    labels = {
        "a": f"(a) model(x), batches of {batch}, inputs on the device",
        "b": f"(b) explain FOLDER --batch-size {batch}: all files written",
        "c": "(c) iter_analyses only: capture, no gradients, no files",
    }
    rows = []
    for k, s in stats.items():
        target = "baseline" if k == "a" else "info"
        verdict = ""
        if k == "b" and checks:
            target, verdict = check.target, check.verdict
        rows.append(
            [labels[k], fmt(s.median), f"{ips[k]:,.1f}", f"{ips[k] / ips['a']:.2f}", target,
             verdict]
        )  # fmt: skip
    cfg = model.config
    print(
        f"# Batch explain: {variant} at {cfg.image_size[0]}×{cfg.image_size[1]}, {n} images of "
        f"{size[0]}×{size[1]}, batch {batch}, {device.type}"
    )
    print(f"device: {device_name(device)}")
    print(environment())
    print(
        f"{repeats} timed run(s) of each case in turns over all {n} images, after {warmup} "
        f"warm-up turn(s); {len(written)} .npz and {pngs} PNG files written"
        + (" (--quick: timings are not meaningful)" if args.quick else "")
        + ("" if checks else "; the target applies on CUDA only")
    )
    print()
    print_table(["case", "median", "images/s", "× (a)", "target", "verdict"], rows)
    print()
    print(f"peak RSS: {peak_rss_mib():.0f} MiB")
    return finish(checks, args.no_check, wrong)


def fmt(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1e3:.0f} ms"


if __name__ == "__main__":
    sys.exit(main())
