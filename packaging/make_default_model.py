"""Train, check and ship the default model and the sample images (issue: ready on first launch).

    .venv/bin/python packaging/make_default_model.py                  # train (about 20-30 min)
    .venv/bin/python packaging/make_default_model.py --from-run DIR   # ship a finished run

Trains the "shapes" preset (64 px, patch 8: an 8 × 8 grid) on the built-in synthetic shapes with
a fixed seed, evaluates it on a fresh shapes set (a seed no training used), and writes
``resources/models/vitviz-shapes-default.safetensors`` with full provenance, plus one sample
scene per class in ``resources/samples/`` (``<shape>.png`` and its object mask
``<shape>_mask.png``), generated from their own seed.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "resources" / "models"
SAMPLES = ROOT / "resources" / "samples"
MODEL_NAME = "vitviz-shapes-default.safetensors"
TRAIN_SEED = 0
SAMPLE_SEED = 20261122
MIN_ACCURACY = 0.95


def train(out: Path, seed: int, threads: int | None) -> Path:
    """Run the shapes preset in this process; returns the best checkpoint."""
    from vitviz.training import preset_config, run_training

    config = preset_config(
        "shapes",
        seed=seed,
        out_dir=str(out),
        threads=threads,
        command=" ".join(shlex.quote(a) for a in sys.argv),
    )
    result = run_training(config, lambda event: _print_event(event), None)
    if result.status != "completed":  # type: ignore[attr-defined]
        raise SystemExit(f"training did not complete: {result}")
    return out / "best.safetensors"


def _print_event(event: object) -> None:
    if getattr(event, "kind", "") == "epoch":
        e = event
        print(
            f"epoch {e.epoch}/{e.epochs}: val acc {e.val_acc:.1%}, "  # type: ignore[attr-defined]
            f"{e.images_per_s:.0f} img/s",
            file=sys.stderr,
            flush=True,
        )  # type: ignore[attr-defined]


def ship(best: Path, command: str) -> Path:
    """Evaluate ``best`` on fresh shapes and write it, with provenance, to resources/models."""
    from vitviz.checkpoints import load_checkpoint, save_checkpoint
    from vitviz.training.evaluate import DEFAULT_SEED, evaluate_shapes_model

    loaded = load_checkpoint(best)
    fresh = evaluate_shapes_model(loaded, n=2000, seed=DEFAULT_SEED)
    print(
        f"fresh set ({fresh.n} images, seed {fresh.seed}): accuracy {fresh.accuracy:.2%}, "
        f"rollout mass in masks {fresh.rollout_mass_in_mask:.3f} vs mask share "
        f"{fresh.mask_share:.3f}",
        file=sys.stderr,
    )
    if fresh.accuracy < MIN_ACCURACY:
        raise SystemExit(f"accuracy {fresh.accuracy:.2%} is below {MIN_ACCURACY:.0%}: not shipped")
    provenance = dict(loaded.provenance)
    provenance.update(
        {
            "made_by": command,
            "fresh_evaluation": {
                "dataset": "shapes",
                "n": fresh.n,
                "seed": fresh.seed,
                "accuracy": fresh.accuracy,
                "rollout_mass_in_mask": fresh.rollout_mass_in_mask,
                "mask_share": fresh.mask_share,
            },
            "shipped_at": time.strftime("%Y-%m-%d"),
        }
    )
    MODELS.mkdir(parents=True, exist_ok=True)
    target = MODELS / MODEL_NAME
    save_checkpoint(loaded.model, target, loaded.class_names, loaded.preprocessing, provenance)
    return target


def make_samples(image_size: int) -> list[Path]:
    """One scene per shape class (the first of each in a seeded batch), with its mask."""
    from vitviz.training.shapes import SHAPE_NAMES, make_shapes

    images, labels, masks = make_shapes(200, image_size, seed=SAMPLE_SEED)
    SAMPLES.mkdir(parents=True, exist_ok=True)
    written = []
    for c, name in enumerate(SHAPE_NAMES):
        i = int(np.flatnonzero(labels.numpy() == c)[0])
        rgb = images[i].permute(1, 2, 0).numpy().astype(np.uint8)
        path = SAMPLES / f"{name}.png"
        Image.fromarray(rgb).save(path, optimize=True)
        Image.fromarray(masks[i].numpy().astype(np.uint8) * 255).save(
            SAMPLES / f"{name}_mask.png", optimize=True
        )
        written.append(path)
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from-run", type=Path, help="a finished run folder to ship")
    parser.add_argument("--seed", type=int, default=TRAIN_SEED)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "default-model-run")
    args = parser.parse_args()
    command = "python packaging/make_default_model.py " + " ".join(
        shlex.quote(a) for a in sys.argv[1:]
    )
    best = (
        args.from_run / "best.safetensors"
        if args.from_run
        else train(args.out, args.seed, args.threads)
    )
    target = ship(best, command)
    from vitviz.checkpoints import load_checkpoint

    size = load_checkpoint(target).config.image_size[0]
    samples = make_samples(size)
    print(
        f"wrote {target} ({target.stat().st_size / 1e6:.2f} MB) and {len(samples)} samples",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
