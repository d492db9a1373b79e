"""Building blocks of the Swin Transformer: patch embedding, window attention with explicit
capture, the (shifted) window block, patch merging."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vitviz.model.layers import DropPath, make_activation
from vitviz.model.swin_config import SwinConfig
from vitviz.model.swin_windows import (
    WindowLayout,
    block_layout,
    partition,
    relative_position_index,
    shift_mask,
    unpartition,
)


class SwinPatchEmbed(nn.Module):
    """(B, C, H, W) image -> (B, H/p, W/p, dim) map: Conv2d (kernel = stride = p), LayerNorm."""

    def __init__(self, config: SwinConfig) -> None:
        super().__init__()
        p = config.patch_size
        self.patch_size = p
        self.pad_image = config.pad_image
        self.proj = nn.Conv2d(config.in_channels, config.dims[0], kernel_size=p, stride=p)
        self.norm = nn.LayerNorm(config.dims[0], eps=config.norm_eps)

    def forward(self, x: Tensor) -> Tensor:
        H, W = x.shape[-2:]
        p = self.patch_size
        if self.pad_image and (H % p or W % p):
            x = F.pad(x, (0, -W % p, 0, -H % p))
        if x.shape[-2] < p or x.shape[-1] < p:
            raise ValueError(f"input {H}×{W} is smaller than the patch size {p}")
        return self.norm(self.proj(x).permute(0, 2, 3, 1))  # (B, gh, gw, dim)


class WindowAttention(nn.Module):
    """Multi-head self-attention inside windows, with a learned relative position bias.

    ``relative_position_bias_table``: ((2·window − 1)², heads), one entry per offset between two
    tokens of a window. With ``capture=True`` softmax(QKᵀ/√d + bias + mask) is computed
    explicitly and returned, (B, windows, heads, n, n), rows = queries; otherwise the fused
    scaled_dot_product_attention runs with bias + mask as its additive mask. Same output.
    """

    def __init__(self, dim: int, heads: int, window: int, qkv_bias: bool = True) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.window = window
        self.scale = self.head_dim**-0.5
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.relative_position_bias_table = nn.Parameter(torch.zeros((2 * window - 1) ** 2, heads))
        self._index: dict[tuple[int, int], Tensor] = {}

    def position_bias(self, window: tuple[int, int]) -> Tensor:
        """(heads, n, n) bias for a (wh, ww) window (at most the table's window)."""
        index = self._index.get(window)
        if index is None:
            index = self._index[window] = relative_position_index(window, self.window)
        table = self.relative_position_bias_table
        n = window[0] * window[1]
        return table[index.to(table.device).reshape(-1)].reshape(n, n, -1).permute(2, 0, 1)

    def forward(
        self, x: Tensor, mask: Tensor | None, window: tuple[int, int], capture: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """x: (B, windows, n, C); mask: (windows, n, n) or None -> (B, windows, n, C), attention."""
        B, nW, n, C = x.shape
        qkv = self.qkv(x).reshape(B * nW, n, 3, self.heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B·nW, heads, n, hd)
        bias = self.position_bias(window).unsqueeze(0)  # (1, heads, n, n)
        if mask is not None:
            bias = (bias + mask.to(bias.dtype).unsqueeze(1)).repeat(B, 1, 1, 1)  # (B·nW, h, n, n)
        attn: Tensor | None = None
        if capture:
            scores = (q * self.scale) @ k.transpose(-2, -1) + bias  # (B·nW, heads, n, n)
            attn = scores.softmax(dim=-1).reshape(B, nW, self.heads, n, n)
            out = attn.reshape(B * nW, self.heads, n, n) @ v  # from the tensor handed back,
            # so that gradients with respect to it reach the output
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.to(q.dtype))
        out = out.transpose(1, 2).reshape(B, nW, n, C)
        return self.proj(out), attn


class SwinMlp(nn.Module):
    """Linear -> activation -> Linear, token-wise."""

    def __init__(self, dim: int, hidden: int, activation: str) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = make_activation(activation)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.act(self.fc1(x)))


class SwinBlock(nn.Module):
    """x + attn(norm1(x)) inside (shifted) windows; x + mlp(norm2(x)). Maps are (B, H, W, C)."""

    def __init__(
        self, config: SwinConfig, stage: int, shifted: bool, drop_path: float = 0.0
    ) -> None:
        super().__init__()
        dim, window = config.dims[stage], config.window_sizes[stage]
        self.window = window
        self.target_shift = window // 2 if shifted else 0
        self.clamp = config.window_clamp
        self.shift_first = config.shift_first
        self.norm1 = nn.LayerNorm(dim, eps=config.norm_eps)
        self.attn = WindowAttention(dim, config.heads[stage], window, config.qkv_bias)
        self.norm2 = nn.LayerNorm(dim, eps=config.norm_eps)
        self.mlp = SwinMlp(dim, config.hidden_dim(stage), config.activation)
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()

    def layout(self, grid: tuple[int, int]) -> WindowLayout:
        return block_layout(grid, self.window, self.target_shift, self.clamp, self.shift_first)

    def forward(
        self, x: Tensor, capture: bool = False
    ) -> tuple[Tensor, Tensor | None, WindowLayout]:
        """(B, H, W, C) -> (B, H, W, C), attention (B, windows, heads, n, n) or None, layout."""
        layout = self.layout((x.shape[1], x.shape[2]))
        windows = partition(self.norm1(x), layout)  # (B, windows, n, C)
        mask = shift_mask(layout, device=x.device)
        y, attn = self.attn(windows, mask, layout.window, capture=capture)
        x = x + self.drop_path(unpartition(y, layout))
        x = x + self.drop_path(self.mlp(self.norm2(x)))
        return x, attn, layout


class PatchMerging(nn.Module):
    """(B, H, W, C) -> (B, ⌈H/2⌉, ⌈W/2⌉, C_out): each 2 × 2 group (padded to even sizes)
    concatenated as x[0::2, 0::2], x[1::2, 0::2], x[0::2, 1::2], x[1::2, 1::2], then LayerNorm
    over the 4·C channels and a Linear without bias."""

    def __init__(self, dim: int, out_dim: int, eps: float) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(4 * dim, eps=eps)
        self.reduction = nn.Linear(4 * dim, out_dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        H, W = x.shape[1], x.shape[2]
        x = F.pad(x, (0, 0, 0, W % 2, 0, H % 2))
        parts = [x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]]
        return self.reduction(self.norm(torch.cat(parts, dim=-1)))
