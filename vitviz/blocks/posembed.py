"""Position embeddings: fixed sine-cosine tables and resampling of learned ones over the grid."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor


def sincos_1d(num_tokens: int, dim: int) -> Tensor:
    """Transformer sinusoid over token positions 0..N-1, as in the first ViT tutorials: (N, dim).

    PE[p, 2i] = sin(p / 10000^(2i/dim)), PE[p, 2i+1] = cos(p / 10000^(2i/dim)).
    """
    pos = torch.arange(num_tokens, dtype=torch.float64)[:, None]  # (N, 1)
    i = torch.arange(0, dim, 2, dtype=torch.float64)[None, :]  # (1, ceil(dim/2))
    angle = pos / torch.pow(10000.0, i / dim)  # (N, ceil(dim/2))
    pe = torch.zeros(num_tokens, dim, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : dim // 2])
    return pe.float()


def sincos_2d(grid: tuple[int, int], dim: int, temperature: float = 10000.0) -> Tensor:
    """2-D sine-cosine table over a gh × gw grid (MAE style), row-major: (gh·gw, dim).

    The first half of the channels encodes the row, the second half the column; each half is
    [sin, cos] of position·ω with ω = 1/temperature^(k/(dim/4)), k = 0..dim/4-1.
    """
    if dim % 4:
        raise ValueError(f"2-D sine-cosine position embedding needs dim divisible by 4 (got {dim})")
    gh, gw = grid
    rows, cols = torch.meshgrid(
        torch.arange(gh, dtype=torch.float64), torch.arange(gw, dtype=torch.float64), indexing="ij"
    )
    quarter = dim // 4
    omega = 1.0 / temperature ** (torch.arange(quarter, dtype=torch.float64) / quarter)  # (dim/4,)

    def encode(pos: Tensor) -> Tensor:
        angle = pos.reshape(-1, 1) * omega[None, :]  # (gh·gw, dim/4)
        return torch.cat([angle.sin(), angle.cos()], dim=1)  # (gh·gw, dim/2)

    return torch.cat([encode(rows), encode(cols)], dim=1).float()


def resample_grid_embedding(
    pos: Tensor,
    old_grid: tuple[int, int],
    new_grid: tuple[int, int],
    antialias: bool = False,
    method: str = "bicubic",
) -> Tensor:
    """Bicubic resampling of a patch position table (1, gh0·gw0, D) -> (1, gh·gw, D).

    ``method``: "bicubic" (to the new size; ``antialias`` as given), "bicubic_antialias" (the
    same with antialias) or "bicubic_offset" (original DINO/DINOv2: scale factor
    (g + 0.1) / g0 per axis, which samples slightly differently from a size).
    """
    if tuple(old_grid) == tuple(new_grid):
        return pos
    gh0, gw0 = old_grid
    D = pos.shape[-1]
    if pos.shape[1] != gh0 * gw0:
        raise ValueError(
            f"position table has {pos.shape[1]} entries, grid {gh0}×{gw0} needs {gh0 * gw0}"
        )
    table = pos.reshape(1, gh0, gw0, D).permute(0, 3, 1, 2)  # (1, D, gh0, gw0)
    dtype = table.dtype
    if method == "bicubic_offset":
        scale = ((new_grid[0] + 0.1) / gh0, (new_grid[1] + 0.1) / gw0)
        table = F.interpolate(table.float(), scale_factor=scale, mode="bicubic")
        if tuple(table.shape[-2:]) != tuple(new_grid):
            raise ValueError(f"offset resampling gave {tuple(table.shape[-2:])}, not {new_grid}")
    else:
        table = F.interpolate(
            table.float(),
            size=tuple(new_grid),
            mode="bicubic",
            align_corners=False,
            antialias=antialias or method == "bicubic_antialias",
        )
    return table.to(dtype).permute(0, 2, 3, 1).reshape(1, new_grid[0] * new_grid[1], D)


def square_grid(num_patches: int) -> tuple[int, int]:
    """The square grid of a position table with ``num_patches`` entries; ValueError if none."""
    side = math.isqrt(num_patches)
    if side * side != num_patches:
        raise ValueError(f"{num_patches} position entries do not form a square grid")
    return (side, side)
