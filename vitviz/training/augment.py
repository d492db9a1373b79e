"""Batched augmentation on uint8 image tensors, on whatever device they live on.

One gather per batch replaces per-sample PIL transforms: random crop with zero padding
(torchvision ``RandomCrop(S, padding=p)``) and horizontal flip (``RandomHorizontalFlip``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def random_crop_flip(
    images: Tensor, padding: int, flip: bool = True, generator: torch.Generator | None = None
) -> Tensor:
    """Random crop after zero padding, then a random horizontal flip, per image.

    images: (B, C, H, W) uint8 (any dtype works). Returns (B, C, H, W), same dtype and device.
    Random numbers come from ``generator`` (on the images' device) for reproducibility.
    """
    B, C, H, W = images.shape
    dev = images.device
    if padding <= 0 and not flip:
        return images
    p = max(padding, 0)
    padded = F.pad(images, (p, p, p, p)) if p else images  # (B, C, H + 2p, W + 2p)
    oy = torch.randint(0, 2 * p + 1, (B, 1), device=dev, generator=generator)
    ox = torch.randint(0, 2 * p + 1, (B, 1), device=dev, generator=generator)
    rows = oy + torch.arange(H, device=dev)  # (B, H)
    cols = ox + torch.arange(W, device=dev)  # (B, W)
    if flip:
        flipped = torch.rand(B, 1, device=dev, generator=generator) < 0.5
        cols = torch.where(flipped, cols.flip(1), cols)  # reversed columns = mirrored crop
    b = torch.arange(B, device=dev).view(B, 1, 1, 1)
    c = torch.arange(C, device=dev).view(1, C, 1, 1)
    return padded[b, c, rows.view(B, 1, H, 1), cols.view(B, 1, 1, W)]  # (B, C, H, W)


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
