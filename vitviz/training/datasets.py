"""Training data in memory as uint8 tensors: shapes, random, an image folder or CIFAR-10.

``load_dataset(config)`` returns a TrainData whatever the source; the loop only sees tensors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from vitviz.core.errors import VitvizError
from vitviz.training.cifar import CifarError, read_cifar10
from vitviz.training.config import DEFAULT_SIZES, TrainConfig
from vitviz.training.folder import (
    FOLDER_RESIZE,
    is_grayscale,
    load_images,
    scan_image_folder,
    split_files,
)
from vitviz.training.shapes import SHAPE_NAMES, SHAPES_RESIZE, make_shapes

RANDOM_CLASSES = 10
VAL_SEED_OFFSET = 1_000_003  # generated validation sets use data_seed + this


class DatasetError(VitvizError):
    """Data that can't be trained on; the message says what was wrong."""


@dataclass
class TrainData:
    """Images (N, C, S, S) uint8 (C = 3 RGB or 1 gray) and labels (N,) int64 for training and
    validation."""

    train_images: Tensor
    train_labels: Tensor
    val_images: Tensor
    val_labels: Tensor
    class_names: list[str]
    resize: str  # how an arbitrary image should be fitted at inference: "crop" | "squash"
    description: dict[str, Any]  # provenance: kind, path, seeds, sizes
    val_masks: Tensor | None = None  # (Nv, S, S) bool object masks (shapes only)
    regenerate: Callable[[int], tuple[Tensor, Tensor]] | None = field(default=None, repr=False)
    notes: list[str] = field(default_factory=list)  # skipped files and the like

    def train_set(self, epoch: int) -> tuple[Tensor, Tensor]:
        """The training images and labels of ``epoch`` (1-based): fresh ones for generated
        data when asked, else the same set every epoch."""
        if self.regenerate is not None and epoch > 1:
            return self.regenerate(epoch)
        return self.train_images, self.train_labels


def channel_stats(images: Tensor, limit: int = 5000) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and std in [0, 1] units of (N, C, S, S) uint8 (first ``limit`` images),
    rounded to 4 places; std at least 0.01. Summed in chunks, so memory stays small."""
    total = torch.zeros(images.shape[1], dtype=torch.float64)
    squares = torch.zeros_like(total)
    count = 0
    for chunk in images[:limit].split(256):
        x = chunk.to(torch.float64).div_(255.0).transpose(0, 1).reshape(images.shape[1], -1)
        total += x.sum(dim=1)
        squares += (x * x).sum(dim=1)
        count += x.shape[1]
    mean = total / max(count, 1)
    std = (squares / max(count, 1) - mean * mean).clamp_min(0).sqrt().clamp_min(0.01)
    return tuple(round(float(v), 4) for v in mean), tuple(round(float(v), 4) for v in std)


def _sizes(cfg: TrainConfig, kind: str) -> tuple[int, int]:
    train, val = DEFAULT_SIZES[kind]
    return cfg.train_size or train, cfg.val_size or val


def _subset(images: Tensor, labels: Tensor, limit: int | None, seed: int) -> tuple[Tensor, Tensor]:
    if limit is None or limit >= len(labels):
        return images, labels
    idx = torch.from_numpy(np.random.default_rng(seed).permutation(len(labels))[:limit])
    return images[idx], labels[idx]


def _shapes(cfg: TrainConfig) -> TrainData:
    n_train, n_val = _sizes(cfg, "shapes")
    seed, S = cfg.effective_data_seed, cfg.image_size
    train_x, train_y, _ = make_shapes(n_train, S, seed)
    val_x, val_y, val_m = make_shapes(n_val, S, seed + VAL_SEED_OFFSET)

    def regenerate(epoch: int) -> tuple[Tensor, Tensor]:
        x, y, _ = make_shapes(n_train, S, seed + epoch - 1)
        return x, y

    desc = dict(
        kind="shapes",
        train_seed=seed,
        val_seed=seed + VAL_SEED_OFFSET,
        fresh_each_epoch=cfg.fresh_each_epoch,
        epoch_seeds="data_seed + epoch - 1" if cfg.fresh_each_epoch else None,
        train_size=n_train,
        val_size=n_val,
        image_size=S,
    )
    return TrainData(
        train_x,
        train_y,
        val_x,
        val_y,
        list(SHAPE_NAMES),
        SHAPES_RESIZE,
        desc,
        val_masks=val_m,
        regenerate=regenerate if cfg.fresh_each_epoch else None,
    )


def random_images(n: int, image_size: int, seed: int) -> tuple[Tensor, Tensor]:
    """Uniform random uint8 images (n, 3, S, S) and random labels (n,) of RANDOM_CLASSES."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (n, 3, image_size, image_size), generator=g, dtype=torch.uint8)
    return x, torch.randint(0, RANDOM_CLASSES, (n,), generator=g)


def _random(cfg: TrainConfig) -> TrainData:
    n_train, n_val = _sizes(cfg, "random")
    seed, S = cfg.effective_data_seed, cfg.image_size
    train_x, train_y = random_images(n_train, S, seed)
    val_x, val_y = random_images(n_val, S, seed + VAL_SEED_OFFSET)
    desc = dict(
        kind="random",
        train_seed=seed,
        val_seed=seed + VAL_SEED_OFFSET,
        train_size=n_train,
        val_size=n_val,
        image_size=S,
    )
    names = [f"class {i}" for i in range(RANDOM_CLASSES)]
    regen = (
        (lambda epoch: random_images(n_train, S, seed + epoch - 1))
        if cfg.fresh_each_epoch
        else None
    )
    return TrainData(train_x, train_y, val_x, val_y, names, "squash", desc, regenerate=regen)


def _folder(cfg: TrainConfig, path: str) -> TrainData:
    scan, problems = scan_image_folder(path)
    if problems or scan is None:
        raise DatasetError("; ".join(problems))
    seed = cfg.effective_data_seed
    train_items, val_items = split_files(scan, cfg.val_fraction, seed)
    channels = cfg.in_channels or 3  # left to the data: RGB first, then gray if it is gray
    train_x, train_y, skipped = load_images(train_items, cfg.image_size, channels)
    val_x, val_y, skipped_val = load_images(val_items, cfg.image_size, channels)
    if len(train_y) == 0 or len(val_y) == 0:
        which = "training" if len(train_y) == 0 else "validation"
        raise DatasetError(f"no readable images for {which} in {scan.root}")
    if cfg.in_channels is None and is_grayscale(train_x) and is_grayscale(val_x):
        train_x, val_x, channels = train_x[:, :1].clone(), val_x[:, :1].clone(), 1
    train_x, train_y = _subset(train_x, train_y, cfg.train_size, seed)
    val_x, val_y = _subset(val_x, val_y, cfg.val_size, seed + 1)
    desc = dict(
        kind="folder",
        path=str(scan.root),
        split="folders" if scan.has_split else "seeded",
        split_seed=None if scan.has_split else seed,
        val_fraction=cfg.val_fraction,
        train_size=len(train_y),
        val_size=len(val_y),
        image_size=cfg.image_size,
        channels=channels,
        channels_from="settings" if cfg.in_channels else "the images",
        skipped=len(skipped) + len(skipped_val),
    )
    return TrainData(
        train_x,
        train_y,
        val_x,
        val_y,
        list(scan.class_names),
        FOLDER_RESIZE,
        desc,
        notes=skipped + skipped_val,
    )


def _resize_u8(images: Tensor, size: int) -> Tensor:
    """(N, 3, s, s) uint8 -> (N, 3, size, size) uint8, bilinear with antialiasing."""
    if images.shape[-1] == size:
        return images
    out = torch.empty(images.shape[0], 3, size, size, dtype=torch.uint8)
    for start in range(0, images.shape[0], 1024):
        x = images[start : start + 1024].float()
        y = F.interpolate(
            x, size=(size, size), mode="bilinear", antialias=True, align_corners=False
        )
        out[start : start + 1024] = y.round().clamp(0, 255).to(torch.uint8)
    return out


def _cifar(cfg: TrainConfig, path: str) -> TrainData:
    try:
        train_x, train_y, test_x, test_y, names = read_cifar10(path)
    except CifarError as exc:
        raise DatasetError(str(exc)) from exc
    seed = cfg.effective_data_seed
    train = _subset(torch.from_numpy(train_x), torch.from_numpy(train_y), cfg.train_size, seed)
    val = _subset(torch.from_numpy(test_x), torch.from_numpy(test_y), cfg.val_size, seed + 1)
    desc = dict(
        kind="cifar10",
        path=str(path),
        val="test_batch",
        train_size=len(train[1]),
        val_size=len(val[1]),
        subset_seed=seed,
        image_size=cfg.image_size,
    )
    return TrainData(
        _resize_u8(train[0], cfg.image_size),
        train[1],
        _resize_u8(val[0], cfg.image_size),
        val[1],
        names,
        "crop",
        desc,
    )


def gray_u8(images: Tensor) -> Tensor:
    """(N, 3, H, W) uint8 RGB -> (N, 1, H, W) uint8 luma, exactly PIL's ``convert("L")``:
    (19595·R + 38470·G + 7471·B + 2¹⁵) >> 16 (ITU-R 601-2)."""
    x = images.to(torch.int32)
    luma = x[:, 0] * 19595 + x[:, 1] * 38470 + x[:, 2] * 7471 + 0x8000
    return (luma >> 16).to(torch.uint8)[:, None]


def _as_gray(data: TrainData) -> TrainData:
    """Generated or CIFAR data (RGB) made grayscale, for a 1-channel model."""
    data.train_images, data.val_images = gray_u8(data.train_images), gray_u8(data.val_images)
    if data.regenerate is not None:
        regenerate = data.regenerate

        def regenerate_gray(epoch: int) -> tuple[Tensor, Tensor]:
            x, y = regenerate(epoch)
            return gray_u8(x), y

        data.regenerate = regenerate_gray
    data.description["channels"] = 1
    return data


def load_dataset(cfg: TrainConfig) -> TrainData:
    """The data ``cfg.dataset`` names, at ``cfg.image_size``, with ``cfg.in_channels`` channels
    (left to the data: a folder of grayscale images gives 1, anything else 3). Raises
    DatasetError."""
    spec = cfg.dataset_spec
    if spec.kind == "folder":
        return _folder(cfg, spec.path or "")
    if spec.kind == "shapes":
        data = _shapes(cfg)
    elif spec.kind == "random":
        data = _random(cfg)
    else:
        data = _cifar(cfg, spec.path or "")
    return _as_gray(data) if cfg.in_channels == 1 else data
