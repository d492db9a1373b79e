"""Building blocks of a PVT v2: the overlapping patch embedding, spatial-reduction attention
with explicit capture, the MLP with a depthwise convolution, the block; and Twins-PCPVT's plain
MLP and position convolution (PEG).

Token maps inside a stage are (B, N, D) with N = H·W row-major; the convolutions see them as
(B, D, H, W).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vitviz.blocks.layers import DropPath
from vitviz.kinds.pyramid.config import PyramidConfig


class OverlapPatchEmbed(nn.Module):
    """(B, C, H, W) -> (B, H', W', D): Conv2d (kernel k, stride s, padding k // 2), LayerNorm.
    H' = ⌊(H + 2·(k // 2) − k) / s⌋ + 1 (⌈H / s⌉ for an odd k)."""

    def __init__(
        self, channels: int, dim: int, kernel: int, stride: int, eps: float, overlap: bool = True
    ) -> None:
        super().__init__()
        pad = kernel // 2 if overlap else 0  # Twins: kernel = stride, no padding
        self.proj = nn.Conv2d(channels, dim, kernel, stride=stride, padding=pad)
        self.norm = nn.LayerNorm(dim, eps=eps)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(self.proj(x).permute(0, 2, 3, 1))


class SpatialReductionAttention(nn.Module):
    """Queries from all N tokens; keys and values from the M reduced tokens.

    Reduction: none (sr 1: M = N); a Conv2d of kernel = stride = sr then LayerNorm
    (M = ⌊H/sr⌋·⌊W/sr⌋); or, ``linear``, AdaptiveAvgPool2d(pool) then a 1 × 1 Conv2d, LayerNorm
    and GELU (M = pool²). With ``capture`` the probabilities softmax(q kᵀ / √d) are computed
    explicitly and returned, (B, heads, N, M), rows = queries; otherwise the fused
    scaled_dot_product_attention runs. Same output.
    """

    def __init__(self, config: PyramidConfig, stage: int) -> None:
        super().__init__()
        dim = config.dims[stage]
        self.heads = config.heads[stage]
        self.head_dim = dim // self.heads
        self.sr_ratio = config.sr_ratios[stage]
        self.linear = config.linear
        self.scale_after = config.scale_after
        self.q = nn.Linear(dim, dim, bias=config.qkv_bias)
        self.kv = nn.Linear(dim, 2 * dim, bias=config.qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.pool = nn.AdaptiveAvgPool2d(config.pool_size) if config.linear else None
        if config.linear or self.sr_ratio > 1:
            k = 1 if config.linear else self.sr_ratio
            self.sr = nn.Conv2d(dim, dim, kernel_size=k, stride=k)
            self.norm = nn.LayerNorm(dim, eps=config.embed_eps)
        else:
            self.sr = None
            self.norm = None
        self.act = nn.GELU() if config.linear else None

    def reduce(self, x: Tensor, grid: tuple[int, int]) -> Tensor:
        """(B, N, D) tokens -> (B, M, D) the keys' and values' tokens."""
        if self.sr is None:
            return x
        B, _, D = x.shape
        m = x.transpose(1, 2).reshape(B, D, *grid)
        if self.pool is not None:
            m = self.pool(m)
        m = self.norm(self.sr(m).flatten(2).transpose(1, 2))
        return self.act(m) if self.act is not None else m

    def forward(
        self, x: Tensor, grid: tuple[int, int], capture: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        B, N, D = x.shape
        q = self.q(x).reshape(B, N, self.heads, self.head_dim).transpose(1, 2)  # (B, h, N, d)
        kv = self.kv(self.reduce(x, grid))
        kv = kv.reshape(B, -1, 2, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        k, v = kv[0], kv[1]  # (B, h, M, d)
        attn = None
        if capture:  # in the order of the library that made the weights: the same rounding
            if self.scale_after:
                scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
            else:
                scores = (q * self.head_dim**-0.5) @ k.transpose(-2, -1)
            attn = scores.softmax(dim=-1)
            out = attn @ v
        else:
            out = F.scaled_dot_product_attention(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(B, N, D)), attn


class GroupedAttention(nn.Module):
    """Twins-SVT's locally-grouped attention: every token attends to the tokens of its ws × ws
    window (tiles of the grid from its top left). With ``capture`` the probabilities
    softmax((q/√d)·kᵀ) are returned as computed, (B, windows, heads, ws², ws²), windows and
    their tokens row-major. A grid that is not whole windows is refused: timm pads it with zero
    tokens whose keys (the qkv bias) take part, and a row over the grid's tokens can't show them.
    """

    def __init__(self, config: PyramidConfig, stage: int, ws: int) -> None:
        super().__init__()
        dim = config.dims[stage]
        self.heads = config.heads[stage]
        self.head_dim = dim // self.heads
        self.ws = ws
        self.qkv = nn.Linear(dim, 3 * dim, bias=config.qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(
        self, x: Tensor, grid: tuple[int, int], capture: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        B, N, D = x.shape
        H, W = grid
        ws = self.ws
        if H % ws or W % ws:
            raise ValueError(
                f"a {H}×{W} token grid is not whole {ws}×{ws} windows: Twins-SVT pads it with "
                f"tokens whose keys take part, which vitviz can't show (use an input whose stage "
                f"grids are multiples of {ws}, e.g. 224 px)"
            )
        h, w, t = H // ws, W // ws, ws * ws
        win = x.reshape(B, h, ws, w, ws, D).transpose(2, 3)  # as timm lays it out: the same
        qkv = self.qkv(win).reshape(B, h * w, t, 3, self.heads, self.head_dim)  # rounding
        q, k, v = qkv.permute(3, 0, 1, 4, 2, 5)  # (B, windows, heads, t, d)
        attn = None
        if capture:
            attn = ((q * self.head_dim**-0.5) @ k.transpose(-2, -1)).softmax(dim=-1)
            out = attn @ v
        else:
            out = F.scaled_dot_product_attention(q, k, v)
        out = out.transpose(2, 3).reshape(B, h, w, ws, ws, D).transpose(2, 3)
        return self.proj(out.reshape(B, N, D)), attn


def window_ids(grid: tuple[int, int], ws: int) -> Tensor:
    """(H, W) the ws × ws window (row-major over windows) of each token of ``grid``."""
    H, W = grid
    rows = torch.arange(H) // ws
    cols = torch.arange(W) // ws
    return rows[:, None] * (W // ws) + cols[None, :]


def windows_to_grid(attn: Tensor, grid: tuple[int, int], ws: int) -> Tensor:
    """(B, windows, heads, t, t) grouped attention (or its gradient) -> (B, heads, N, N) over
    the row-major grid, 0 between tokens of different windows."""
    B, nw, heads, t, _ = attn.shape
    H, W = grid
    order = torch.arange(H * W, device=attn.device).reshape(H // ws, ws, W // ws, ws)
    order = order.transpose(1, 2).reshape(nw, t)  # grid index of window n's token i
    out = attn.new_zeros(B, heads, H * W, H * W)
    rows = order[:, :, None].expand(nw, t, t)
    cols = order[:, None, :].expand(nw, t, t)
    out[:, :, rows, cols] = attn.permute(0, 2, 1, 3, 4)
    return out


class DepthwiseMlp(nn.Module):
    """fc1, (ReLU where ``linear``), depthwise 3 × 3 Conv2d over the grid, GELU, fc2."""

    def __init__(self, dim: int, hidden: int, extra_relu: bool) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.relu = nn.ReLU() if extra_relu else nn.Identity()
        self.dwconv = nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: Tensor, grid: tuple[int, int]) -> Tensor:
        h = self.fc1(x)
        B, _, C = h.shape
        h = self.dwconv(self.relu(h.transpose(1, 2).reshape(B, C, *grid)))
        return self.fc2(self.act(h.flatten(2).transpose(1, 2)))


class PlainMlp(nn.Module):
    """fc1, GELU, fc2 on (B, N, D) tokens (Twins': no depthwise conv; ``grid`` unused)."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: Tensor, grid: tuple[int, int]) -> Tensor:
        return self.fc2(self.act(self.fc1(x)))


class PosConv(nn.Module):
    """Twins' position convolution (PEG): (B, N, D) -> x + depthwise 3 × 3 Conv2d(x) over the
    grid (zero padding 1, with bias)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(dim, dim, 3, padding=1, groups=dim)

    def forward(self, x: Tensor, grid: tuple[int, int]) -> Tensor:
        B, _, D = x.shape
        m = x.transpose(1, 2).reshape(B, D, *grid)
        return (self.proj(m) + m).flatten(2).transpose(1, 2)


class PyramidBlock(nn.Module):
    """x + attn(norm1(x)); x + mlp(norm2(x)) on (B, N, D) tokens of a grid."""

    def __init__(
        self, config: PyramidConfig, stage: int, drop_path: float = 0.0, window: int = 0
    ) -> None:
        super().__init__()
        dim = config.dims[stage]
        self.norm1 = nn.LayerNorm(dim, eps=config.norm_eps)
        self.attn: nn.Module = (
            GroupedAttention(config, stage, window)
            if window
            else SpatialReductionAttention(config, stage)
        )
        self.norm2 = nn.LayerNorm(dim, eps=config.norm_eps)
        hidden = config.mlp_hidden_dims[stage]
        self.mlp = (
            DepthwiseMlp(dim, hidden, config.linear) if config.mlp_dwconv else PlainMlp(dim, hidden)
        )
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()

    def forward(
        self, x: Tensor, grid: tuple[int, int], capture: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        a, attn = self.attn(self.norm1(x), grid, capture)
        x = x + self.drop_path(a)
        return x + self.drop_path(self.mlp(self.norm2(x), grid)), attn
