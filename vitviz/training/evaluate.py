"""How well a shapes model learned, on fresh shapes it never saw: accuracy, and how much of its
attention rollout falls on the object compared with the object's share of the image.

    python -m vitviz.training.evaluate CHECKPOINT [--n 2000] [--seed S] [--json]

Rollout mass inside the mask: the model kind's rollout map over its clickable grid (a ViT's CLS
rollout R[CLS, patches], DESIGN §5; a Swin's windowed rollout) normalised to sum 1 over the
grid, weighted by each patch's share of object pixels, summed; the baseline is the mask's share
of the image (what a uniform map would score). Ratio > 1: attention lands on
the object more than chance.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from vitviz import explain
from vitviz.checkpoints import CheckpointError, LoadedModel, load_checkpoint
from vitviz.training.augment import Normalizer
from vitviz.training.datasets import gray_u8
from vitviz.training.shapes import SHAPE_NAMES, make_shapes

DEFAULT_SEED = 987_654_321  # far from the seeds training uses (data_seed + epoch, + 1_000_003)


@dataclass
class ShapesEvaluation:
    n: int
    seed: int
    accuracy: float
    rollout_mass_in_mask: float  # mean over images of the rollout mass on object patches
    mask_share: float  # mean share of the image the objects cover
    ratio: float  # rollout_mass_in_mask / mask_share
    per_class_accuracy: dict[str, float]
    seconds: float


def patch_coverage(masks: Tensor, grid: tuple[int, int]) -> Tensor:
    """Share of each patch covered by the object: (B, H, W) bool -> (B, gh, gw) float32."""
    return F.adaptive_avg_pool2d(masks[:, None].float(), grid)[:, 0]


def rollout_mass(
    attentions: Sequence[Tensor], grid: tuple[int, int], num_prefix: int, coverage: Tensor
) -> Tensor:
    """Per image, the share of the CLS rollout over the patches that lies on the object.

    attentions: L × (B, heads, N, N); coverage: (B, gh, gw) in [0, 1]. Returns (B,).
    """
    maps = explain.rollout(attentions, grid, num_prefix)  # (B, gh, gw), scaled to max 1
    return map_mass(maps, coverage)


def map_mass(maps: Tensor, coverage: Tensor) -> Tensor:
    """Per image, the share of a map's mass on the object: maps, coverage (B, gh, gw) -> (B,)."""
    mass = maps / maps.flatten(1).sum(dim=1).clamp_min(1e-12)[:, None, None]
    return (mass * coverage).flatten(1).sum(dim=1)


def _check_shapes_model(loaded: LoadedModel) -> None:
    if list(loaded.class_names) != list(SHAPE_NAMES):
        raise CheckpointError(
            "This checkpoint was not trained on the synthetic shapes: its classes are "
            f"{', '.join(loaded.class_names[:10])}; expected {', '.join(SHAPE_NAMES)}."
        )


def evaluate_shapes_model(
    loaded: LoadedModel, n: int = 2000, seed: int = DEFAULT_SEED, batch_size: int = 250
) -> ShapesEvaluation:
    """Accuracy and rollout-in-mask of a shapes model on ``n`` fresh images from ``seed``."""
    _check_shapes_model(loaded)
    start = time.perf_counter()
    model = loaded.model.eval()
    side = loaded.kind.training  # the kind it carries since it was opened
    if side is None:
        raise CheckpointError(f"vitviz can't evaluate a {type(model).__name__} on the shapes.")
    prep = loaded.preprocessing
    size = prep.image_size[0]
    device = next(model.parameters()).device
    images, labels, masks = make_shapes(n, size, seed)
    if prep.channels == 1:  # a shapes model trained on grayscale
        images = gray_u8(images)
    normalize = Normalizer(prep.mean, prep.std, device)
    correct = torch.zeros(len(SHAPE_NAMES))
    count = torch.zeros(len(SHAPE_NAMES))
    inside, share = [], []
    with torch.inference_mode():
        for i in range(0, n, batch_size):
            x = normalize(images[i : i + batch_size].to(device))
            y = labels[i : i + batch_size]
            logits, maps = side.rollout_maps(model, x)  # (B, classes), (B, gh, gw)
            pred = logits.argmax(dim=-1).cpu()
            correct.index_add_(0, y, (pred == y).float())
            count.index_add_(0, y, torch.ones(len(y)))
            grid = (int(maps.shape[-2]), int(maps.shape[-1]))
            cover = patch_coverage(masks[i : i + batch_size], grid).to(device)
            inside.append(map_mass(maps, cover).cpu())
            share.append(cover.flatten(1).mean(dim=1).cpu())
    mass = float(torch.cat(inside).mean())
    mask_share = float(torch.cat(share).mean())
    per_class = {
        name: float(correct[c] / count[c]) if count[c] else float("nan")
        for c, name in enumerate(SHAPE_NAMES)
    }
    return ShapesEvaluation(
        n,
        seed,
        float(correct.sum() / max(n, 1)),
        mass,
        mask_share,
        mass / max(mask_share, 1e-12),
        per_class,
        time.perf_counter() - start,
    )


def evaluate_shapes_checkpoint(
    path: str | Path, n: int = 2000, seed: int = DEFAULT_SEED, device: str = "cpu"
) -> ShapesEvaluation:
    """Load ``path`` and evaluate it with evaluate_shapes_model."""
    from vitviz.core.devices import resolve_device

    loaded = load_checkpoint(path)
    loaded.model.to(resolve_device(device))
    used = _training_seeds(loaded)
    if seed in used:
        raise ValueError(f"seed {seed} was used in training; pick another with --seed")
    return evaluate_shapes_model(loaded, n, seed)


def _training_seeds(loaded: LoadedModel) -> set[int]:
    """Seeds of the shapes this checkpoint was trained and validated on (from provenance)."""
    dataset = loaded.provenance.get("dataset", {}) if loaded.provenance else {}
    if not isinstance(dataset, dict):
        return set()
    seeds = {dataset.get("train_seed"), dataset.get("val_seed")}
    epochs = loaded.provenance.get("epochs", 1)
    train_seed = dataset.get("train_seed")
    if dataset.get("fresh_each_epoch") and isinstance(train_seed, int) and isinstance(epochs, int):
        seeds |= {train_seed + e for e in range(epochs)}
    return {s for s in seeds if isinstance(s, int)}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m vitviz.training.evaluate",
        description="Accuracy and rollout-in-mask of a shapes model on fresh shapes.",
    )
    p.add_argument("checkpoint", type=Path)
    p.add_argument("--n", type=int, default=2000, help="fresh images (default 2000)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED)
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", action="store_true", help="print JSON")
    args = p.parse_args(argv)
    try:
        result = evaluate_shapes_checkpoint(args.checkpoint, args.n, args.seed, args.device)
    except (CheckpointError, ValueError) as exc:
        print(f"evaluate: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(asdict(result), indent=2))
        return 0
    print(
        f"{args.checkpoint}: {result.n} fresh shapes (seed {result.seed}), {result.seconds:.1f} s"
    )
    print(f"accuracy:               {result.accuracy:.2%}")
    print(f"rollout mass in masks:  {result.rollout_mass_in_mask:.3f}")
    print(f"masks' share of image:  {result.mask_share:.3f}")
    print(f"ratio:                  {result.ratio:.2f}×")
    print(
        "per class:              "
        + ", ".join(f"{k} {v:.1%}" for k, v in result.per_class_accuracy.items())
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
