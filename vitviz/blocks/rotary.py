"""Rotary position embedding (RoPE) on the patch tokens' queries and keys.

Each head's q and k (width hd) are cut into hd/2 pairs; pair j of the token at grid cell
(r, c) is turned by an angle θ_j(r, c): (a, b) -> (a·cos θ − b·sin θ, b·cos θ + a·sin θ).
Scores q·k then depend on the two tokens' relative position. Prefix tokens are not turned.

Pairing (``rope_half``): interleaved, pair j = channels (2j, 2j+1); or rotate-half, pair j =
channels (j, j + hd/2).

Angles, with c = (c₀, c₁) the token's coordinates, (row, column), or (column, row) with
``rope_xy``, and hd/4 frequencies per coordinate (the first hd/4 angles turn by c₀, the next
hd/4 by c₁):

- "axial" (EVA-02, timm ``RotaryEmbeddingCat``): c = grid index + ``rope_offset``, rescaled by
  ref/grid per axis when ``rope_ref_grid`` is set; θ = c · T^(−k/(hd/4)), k = 0..hd/4−1.
- "dinov3": c = 2·(index + ½ + offset)/size − 1 per axis (centred in [−1, 1]);
  θ = 2π·c / T^(k/(hd/4)).
- "mixed" (RoPE-Mixed): learnt frequencies ``freqs`` (2, depth, heads, hd/2) per layer and
  head; θ_j = c₀·f₀ⱼ + c₁·f₁ⱼ over index coordinates (no offset, no rescaling).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from vitviz.blocks.config import ViTConfig


def grid_coordinates(config: ViTConfig, grid: tuple[int, int]) -> Tensor:
    """(gh·gw, 2) float32 coordinates of the patches, row-major, in the config's channel order.
    float32 throughout, in timm's order of operations: the rotary angles grow with the
    position, and the tables must be timm's to the last bit for attention within 1e-5."""
    gh, gw = grid
    f32 = torch.float32
    if config.rope == "dinov3":
        rows = (torch.arange(0.5, gh, dtype=f32) + config.rope_offset) / gh
        cols = (torch.arange(0.5, gw, dtype=f32) + config.rope_offset) / gw
    else:
        offset = 0.0 if config.rope == "mixed" else config.rope_offset
        rows = torch.arange(gh).to(f32) + offset
        cols = torch.arange(gw).to(f32) + offset
        ref = config.rope_ref_grid
        if ref is not None and config.rope == "axial":
            rows, cols = rows / gh * ref[0], cols / gw * ref[1]
    r, c = torch.meshgrid(rows, cols, indexing="ij")
    coords = torch.stack([t.flatten() for t in ((c, r) if config.rope_xy else (r, c))], dim=-1)
    return 2.0 * coords - 1.0 if config.rope == "dinov3" else coords


def _layout(angles: Tensor, half: bool) -> Tensor:
    """(..., hd/2) angles -> (..., hd): each pair's angle on both of its channels."""
    return torch.cat([angles, angles], dim=-1) if half else angles.repeat_interleave(2, dim=-1)


def rotate(x: Tensor, sin: Tensor, cos: Tensor, half: bool) -> Tensor:
    """x (..., N, hd) turned pairwise: x·cos + x̃·sin, x̃ = (−b, a) of each pair (a, b)."""
    if half:
        a, b = x.chunk(2, dim=-1)
        partner = torch.cat([-b, a], dim=-1)
    else:
        partner = torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).reshape(x.shape)
    return x * cos + partner * sin


class Rotary(nn.Module):
    """The model's rotary tables: ``tables(grid)`` gives one (sin, cos) per layer, each
    broadcastable to (B, heads, gh·gw, hd). Only "mixed" has parameters (``freqs``)."""

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.config = config
        hd = config.head_dim
        self.freqs: nn.Parameter | None = None
        if config.rope == "mixed":
            self.freqs = nn.Parameter(torch.zeros(2, config.depth, config.heads, hd // 2))
        self._cache: tuple[tuple[int, int], torch.device, torch.dtype, list] | None = None

    def _fixed_angles(self, coords: Tensor) -> Tensor:
        """(N, 2) coordinates -> (N, hd/2) angles of "axial" / "dinov3" (float32)."""
        cfg = self.config
        quarter = cfg.head_dim // 4
        if cfg.rope == "dinov3":
            periods = cfg.rope_temperature ** (
                2.0 * torch.arange(quarter, dtype=torch.float32) / (cfg.head_dim // 2)
            )
            per_axis = 2 * math.pi * coords[:, :, None] / periods
        else:
            exponent = torch.arange(quarter).to(torch.float32) / quarter
            per_axis = coords[:, :, None] * (1.0 / cfg.rope_temperature**exponent)
        return per_axis.flatten(1)  # (N, 2, hd/4) -> (N, hd/2): c₀'s angles, then c₁'s

    def tables(self, grid: tuple[int, int], like: Tensor) -> list[tuple[Tensor, Tensor]]:
        """Per layer (sin, cos): (1, 1, N, hd) fixed or (1, heads, N, hd) mixed, in ``like``'s
        dtype and device; N = gh·gw."""
        cfg = self.config
        coords = grid_coordinates(cfg, grid)
        if self.freqs is None:
            key = (grid, like.device, like.dtype)
            if self._cache is not None and self._cache[:3] == key:
                return self._cache[3]
            with torch.inference_mode(False):  # kept: a later backward pass saves them
                angles = _layout(self._fixed_angles(coords), cfg.rope_half)  # (N, hd)
                sin = angles.sin().to(like)[None, None]
                cos = angles.cos().to(like)[None, None]
            out = [(sin, cos)] * cfg.depth
            self._cache = (grid, like.device, like.dtype, out)
            return out
        f = self.freqs.float()  # (2, L, H, hd/2): learnt, so autograd follows it
        c = coords.to(f)
        angles = c[:, 0, None] * f[0, :, :, None, :] + c[:, 1, None] * f[1, :, :, None, :]
        angles = _layout(angles, half=False)  # (L, H, N, hd)
        sin, cos = angles.sin().to(like.dtype), angles.cos().to(like.dtype)
        return [(sin[i][None], cos[i][None]) for i in range(cfg.depth)]


def apply_rotary(
    q: Tensor, k: Tensor, table: tuple[Tensor, Tensor] | None, prefix: int, half: bool
) -> tuple[Tensor, Tensor]:
    """q, k (B, heads, N, hd) with the patch tokens (after ``prefix`` tokens) turned."""
    if table is None:
        return q, k
    sin, cos = table

    def turn(t: Tensor) -> Tensor:
        return torch.cat([t[:, :, :prefix], rotate(t[:, :, prefix:], sin, cos, half)], dim=2)

    return turn(q), turn(k)
