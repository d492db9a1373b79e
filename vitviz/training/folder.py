"""An image folder with one sub-folder per class, optionally split into ``train/`` and ``val/``.

``scan_image_folder`` only lists files (torch-free, used to refuse bad folders before a run);
``load_image_folder`` decodes them into uint8 tensors at the training size.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from vitviz.imaging.loading import ImageLoadError, full_size, list_images, load_image

if TYPE_CHECKING:
    import torch

# How user images are fitted at inference: resize to cover, centre-crop (what training did).
FOLDER_RESIZE = "crop"


@dataclass
class FolderScan:
    """What a folder holds: class names (sorted) and image paths per split and class."""

    root: Path
    class_names: list[str]
    train: dict[str, list[Path]]  # class name -> images
    val: dict[str, list[Path]] | None  # None: no val/ folder, split by seed

    @property
    def has_split(self) -> bool:
        return self.val is not None


def _classes(folder: Path) -> dict[str, list[Path]]:
    """Class sub-folders of ``folder`` (hidden ones skipped) and the images directly in each."""
    return {
        d.name: list_images(d)
        for d in sorted(folder.iterdir(), key=lambda p: p.name)
        if d.is_dir() and not d.name.startswith(".")
    }


def scan_image_folder(path: str | Path) -> tuple[FolderScan | None, list[str]]:
    """List a class folder; returns the scan and the problems that make it unusable."""
    root = Path(path).expanduser()
    if not root.is_dir():
        return None, [f"dataset folder {root} does not exist or is not a folder"]
    split = (root / "train").is_dir() and (root / "val").is_dir()
    train = _classes(root / "train" if split else root)
    val = _classes(root / "val") if split else None
    problems = []
    where = f"{root / 'train'}" if split else f"{root}"
    usable = sorted(name for name, files in train.items() if files)
    if len(usable) < 2:
        problems.append(
            f"dataset folder {where} needs at least two class sub-folders with images in them "
            f"(found {len(usable)}{': ' + usable[0] if usable else ''}); expected "
            "FOLDER/<class>/<image files>, optionally split as FOLDER/train/<class> and "
            "FOLDER/val/<class>"
        )
    if val is not None:
        extra = sorted(name for name, files in val.items() if files and name not in usable)
        if extra:
            problems.append(f"{root / 'val'} has classes that train/ lacks: {', '.join(extra)}")
        if not any(val.values()):
            problems.append(f"{root / 'val'} holds no images in class sub-folders")
    elif not problems and max(len(f) for f in train.values()) < 2:
        problems.append(
            f"dataset folder {root} has one image per class: a class needs two or more so one "
            "can be held out for validation (or give the folder train/ and val/ sub-folders)"
        )
    scan = FolderScan(
        root,
        usable,
        {k: train[k] for k in usable},
        None if val is None else {k: val.get(k, []) for k in usable},
    )
    return scan, problems


def split_files(
    scan: FolderScan, val_fraction: float, seed: int
) -> tuple[list[tuple[Path, int]], list[tuple[Path, int]]]:
    """(path, label) lists for training and validation: the folder's own split, or a seeded
    per-class split that puts ``val_fraction`` of each class (at least one image of any class
    with two or more) into validation."""
    train: list[tuple[Path, int]] = []
    val: list[tuple[Path, int]] = []
    rng = np.random.default_rng(seed)
    for label, name in enumerate(scan.class_names):
        if scan.val is not None:
            train += [(p, label) for p in scan.train[name]]
            val += [(p, label) for p in scan.val[name]]
            continue
        files = scan.train[name]
        order = rng.permutation(len(files))
        n_val = min(len(files) - 1, max(1, round(val_fraction * len(files))))
        val += [(files[i], label) for i in order[:n_val]]
        train += [(files[i], label) for i in order[n_val:]]
    return train, val


def load_images(
    items: list[tuple[Path, int]], image_size: int, channels: int = 3
) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """Decode, resize to cover and centre-crop to image_size² (as inference does), as RGB
    (``channels`` 3) or grayscale (1: PIL's luma, taken before resizing, as inference does).

    Returns images (N, C, S, S) uint8, labels (N,) int64 and messages for skipped files.
    """
    import torch

    from vitviz.imaging import Preprocessing, prepare_image
    from vitviz.imaging.reduction import model_min_size

    prep = Preprocessing(
        image_size=image_size,
        resize=FOLDER_RESIZE,
        interpolation="bicubic",
        mean=0.5,
        std=0.5,
        channels=channels,
    )
    images = np.empty((len(items), image_size, image_size, channels), dtype=np.uint8)
    labels = np.empty(len(items), dtype=np.int64)
    skipped: list[str] = []
    n = 0
    for path, label in items:
        try:
            # a large photo is decoded only as large as the training input needs
            image = load_image(path, max_side=1, min_size=model_min_size(prep, 1))
            pixels = prepare_image(image, prep, 1, full_size(image)).pixels  # (S, S, 3)
        except ImageLoadError as exc:
            skipped.append(f"skipped {path}: {exc}")
            continue
        images[n] = pixels[..., :channels]  # a grayscale input is repeated on R, G, B
        labels[n] = label
        n += 1
    x = torch.from_numpy(images[:n]).permute(0, 3, 1, 2).contiguous()  # (N, C, S, S)
    return x, torch.from_numpy(labels[:n]), skipped


def is_grayscale(images: torch.Tensor) -> bool:
    """Whether (N, 3, S, S) images have R = G = B everywhere (a folder of grayscale files)."""
    import torch

    return bool(torch.equal(images[:, 0], images[:, 1]) and torch.equal(images[:, 1], images[:, 2]))
