"""Batched augmentation on uint8 image tensors, on whatever device they live on.

One gather per batch replaces per-sample PIL transforms: random crop with zero padding
(torchvision ``RandomCrop(S, padding=p)``) and horizontal flip (``RandomHorizontalFlip``).
The random draws (``crop_flip_draws``) and the gather (``CropFlip``) are separate, so the
training step can compile the gather with the rest of its forward pass while the draws keep
their generator.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

CropFlipDraws = tuple[Tensor, Tensor, Tensor | None]  # oy (B, 1), ox (B, 1), flipped (B, 1)


def crop_flip_draws(
    batch: int,
    padding: int,
    flip: bool,
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
) -> CropFlipDraws:
    """Per-image crop offsets in [0, 2p] and flip choices, drawn in this order: oy, ox, flip.

    Returns oy (B, 1) int64, ox (B, 1) int64 and flipped (B, 1) bool (None without flip).
    """
    p = max(padding, 0)
    oy = torch.randint(0, 2 * p + 1, (batch, 1), device=device, generator=generator)
    ox = torch.randint(0, 2 * p + 1, (batch, 1), device=device, generator=generator)
    flipped = None
    if flip:
        flipped = torch.rand(batch, 1, device=device, generator=generator) < 0.5
    return oy, ox, flipped


class CropFlip:
    """Applies drawn crops and flips to (B, C, H, W) batches of one shape and device.

    The index tensors that do not depend on the draws are made once here, not per batch.
    """

    def __init__(
        self, batch: int, channels: int, height: int, width: int, padding: int, device
    ) -> None:
        self.padding = max(padding, 0)
        self.rows = torch.arange(height, device=device)  # (H,)
        self.cols = torch.arange(width, device=device)  # (W,)
        self.cols_mirrored = self.cols.flip(0)  # (W,) W-1 .. 0
        self.b = torch.arange(batch, device=device).view(batch, 1, 1, 1)
        self.c = torch.arange(channels, device=device).view(1, channels, 1, 1)

    def __call__(self, images: Tensor, draws: CropFlipDraws) -> Tensor:
        """images (B, C, H, W) any dtype -> (B, C, H, W): crop of the zero-padded image at
        (oy, ox), mirrored where flipped."""
        B, _, H, W = images.shape
        oy, ox, flipped = draws
        p = self.padding
        padded = F.pad(images, (p, p, p, p)) if p else images  # (B, C, H + 2p, W + 2p)
        rows = oy + self.rows  # (B, H)
        # mirrored crop: reversed columns (ox + W-1-j is the flip of ox + j)
        cols = ox + (
            self.cols if flipped is None else torch.where(flipped, self.cols_mirrored, self.cols)
        )
        return padded[self.b, self.c, rows.view(B, 1, H, 1), cols.view(B, 1, 1, W)]


def random_crop_flip(
    images: Tensor, padding: int, flip: bool = True, generator: torch.Generator | None = None
) -> Tensor:
    """Random crop after zero padding, then a random horizontal flip, per image.

    images: (B, C, H, W) uint8 (any dtype works). Returns (B, C, H, W), same dtype and device.
    Random numbers come from ``generator`` (on the images' device) for reproducibility.
    """
    B, C, H, W = images.shape
    if padding <= 0 and not flip:
        return images
    draws = crop_flip_draws(B, padding, flip, generator, images.device)
    return CropFlip(B, C, H, W, padding, images.device)(images, draws)


class Normalizer:
    """uint8 (B, C, H, W) -> float (B, C, H, W): (x/255 - mean)/std as one multiply-add."""

    def __init__(
        self, mean: tuple[float, ...], std: tuple[float, ...], device: torch.device | str = "cpu"
    ) -> None:
        m = torch.tensor(mean, dtype=torch.float32, device=device).view(1, -1, 1, 1)
        s = torch.tensor(std, dtype=torch.float32, device=device).view(1, -1, 1, 1)
        self.scale = 1.0 / (255.0 * s)
        self.shift = -m / s

    def __call__(self, images: Tensor) -> Tensor:
        return torch.addcmul(self.shift, images.float(), self.scale)
