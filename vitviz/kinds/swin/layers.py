"""Building blocks of the Swin Transformer: patch embedding, window attention with explicit
capture, the (shifted) window block, patch merging."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vitviz.blocks.layers import DropPath, make_activation
from vitviz.kinds.swin.config import SwinConfig
from vitviz.kinds.swin.windows import (
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


class _WindowAttentionBase(nn.Module):
    """Multi-head self-attention inside windows, plus a relative position bias.

    With ``capture=True`` the probabilities softmax(scores + bias + mask) are computed explicitly
    and returned, (B, windows, heads, n, n), rows = queries; otherwise the fused
    scaled_dot_product_attention runs with bias + mask as its additive mask. Same output.
    Subclasses give the position bias and how queries and keys are scaled.
    """

    def __init__(self, dim: int, heads: int, window: int, qkv_bias: bool = True) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.window = window
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self._index: dict[tuple, Tensor] = {}

    def _relative_index(
        self, window: tuple[int, int], table: tuple[int, int], device: torch.device
    ) -> Tensor:
        """(n, n) rows of a table of offsets for a (wh, ww) window, kept on ``device``."""
        key = (window, table, device)
        index = self._index.get(key)
        if index is None:
            with torch.inference_mode(False):  # kept: a later backward pass saves it
                index = self._index[key] = relative_position_index(window, table).to(device)
        return index

    def position_bias(self, window: tuple[int, int]) -> Tensor:
        """(heads, n, n) bias for a (wh, ww) window (at most the block's window)."""
        raise NotImplementedError

    def queries_keys(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor, float | Tensor]:
        """(q', k', scale) with scores = scale · q'k'ᵀ (a per-head (heads, 1, 1) scale is
        applied after the product, in the library's order)."""
        raise NotImplementedError

    def qkv_bias(self) -> Tensor | None:
        return self.qkv.bias

    def forward(
        self, x: Tensor, mask: Tensor | None, window: tuple[int, int], capture: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """x: (B, windows, n, C); mask: (windows, n, n) or None -> (B, windows, n, C), attention."""
        B, nW, n, C = x.shape
        qkv = F.linear(x, self.qkv.weight, self.qkv_bias())
        qkv = qkv.reshape(B * nW, n, 3, self.heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B·nW, heads, n, hd)
        q, k, scale = self.queries_keys(q, k)
        bias = self.position_bias(window).unsqueeze(0)  # (1, heads, n, n)
        if mask is not None:
            bias = (bias + mask.to(bias.dtype).unsqueeze(1)).repeat(B, 1, 1, 1)  # (B·nW, h, n, n)
        attn: Tensor | None = None
        if capture:
            if isinstance(scale, Tensor):
                scores = (q @ k.transpose(-2, -1)) * scale + bias  # (B·nW, heads, n, n)
            else:
                scores = (q * scale) @ k.transpose(-2, -1) + bias
            attn = scores.softmax(dim=-1).reshape(B, nW, self.heads, n, n)
            out = attn.reshape(B * nW, self.heads, n, n) @ v  # from the tensor handed back,
            # so that gradients with respect to it reach the output
        else:
            if isinstance(scale, Tensor):
                q, scale = q * scale, 1.0
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.to(q.dtype), scale=scale)
        out = out.transpose(1, 2).reshape(B, nW, n, C)
        return self.proj(out), attn


class WindowAttention(_WindowAttentionBase):
    """Swin v1: scores QKᵀ/√d plus a learned bias per offset,
    ``relative_position_bias_table`` ((2·window − 1)², heads)."""

    def __init__(self, dim: int, heads: int, window: int, qkv_bias: bool = True) -> None:
        super().__init__(dim, heads, window, qkv_bias)
        self.scale = self.head_dim**-0.5
        self.relative_position_bias_table = nn.Parameter(torch.zeros((2 * window - 1) ** 2, heads))

    def position_bias(self, window: tuple[int, int]) -> Tensor:
        table = self.relative_position_bias_table
        index = self._relative_index(window, (self.window, self.window), table.device)
        index = index.reshape(-1)
        n = window[0] * window[1]
        return table[index].reshape(n, n, -1).permute(2, 0, 1)

    def queries_keys(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor, float]:
        return q, k, self.scale


class CosineWindowAttention(_WindowAttentionBase):
    """Swin v2: scores cos(q, k)·exp(min(logit_scale, log 100)) plus 16·sigmoid of a small MLP
    (``cpb_mlp``: Linear(2, hidden), ReLU, Linear(hidden, heads) without bias) over the
    log-spaced offsets sign(d)·log2(1 + 8|d|/(w − 1))/3. The key has no bias."""

    def __init__(
        self,
        dim: int,
        heads: int,
        window: int,
        qkv_bias: bool = True,
        pretrained_window: int = 0,
        hidden: int = 512,
    ) -> None:
        super().__init__(dim, heads, window, qkv_bias)
        self.pretrained_window = pretrained_window
        self.logit_scale = nn.Parameter(torch.full((heads, 1, 1), math.log(10.0)))
        self.cpb_mlp = nn.Sequential(
            nn.Linear(2, hidden), nn.ReLU(), nn.Linear(hidden, heads, bias=False)
        )

    def qkv_bias(self) -> Tensor | None:
        bias = self.qkv.bias
        if bias is None:
            return None
        dim = bias.shape[0] // 3
        zero = torch.zeros(dim, dtype=bias.dtype, device=bias.device)
        return torch.cat([bias[:dim], zero, bias[2 * dim :]])

    def offsets(self, window: tuple[int, int], like: Tensor) -> Tensor:
        """((2wh − 1)·(2ww − 1), 2) log-spaced offsets, rows in the v1 table's order."""
        wh, ww = window
        pw = self.pretrained_window
        dy = torch.arange(-(wh - 1), wh, dtype=torch.float32) / max((pw or wh) - 1, 1)
        dx = torch.arange(-(ww - 1), ww, dtype=torch.float32) / max((pw or ww) - 1, 1)
        grid = torch.stack(torch.meshgrid(dy, dx, indexing="ij"), dim=-1) * 8
        grid = torch.sign(grid) * torch.log2(grid.abs() + 1.0) / math.log2(8)
        return grid.reshape(-1, 2).to(device=like.device, dtype=like.dtype)

    def position_bias(self, window: tuple[int, int]) -> Tensor:
        weight = self.cpb_mlp[0].weight
        table = self.cpb_mlp(self.offsets(window, weight))  # ((2wh−1)(2ww−1), heads)
        wh, ww = window
        index = self._relative_index(window, window, weight.device)  # table of this window
        n = wh * ww
        bias = table[index.reshape(-1)].reshape(n, n, -1).permute(2, 0, 1)
        return 16 * torch.sigmoid(bias)

    def queries_keys(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor, float]:
        scale = torch.clamp(self.logit_scale, max=math.log(100.0)).exp()  # (heads, 1, 1)
        eps = max(1e-12, torch.finfo(q.dtype).tiny)  # 1e-12 is 0 in float16: 0/0 on padding
        return F.normalize(q, dim=-1, eps=eps) * scale, F.normalize(k, dim=-1, eps=eps), 1.0


class _MetaMlp(nn.Module):
    """SwinV2-CR's position MLP: Linear(2, hidden), ReLU, Linear(hidden, heads), both biased."""

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(2, hidden)
        self.fc2 = nn.Linear(hidden, heads)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(F.relu(self.fc1(x)))


class CrWindowAttention(_WindowAttentionBase):
    """SwinV2-CR (timm's swinv2_cr): scores cos(q, k)·exp(min(logit_scale, log 100)) plus
    ``meta_mlp`` over the offsets sign(d)·ln(1 + |d|) (dy, dx in tokens, not scaled by the
    window), the MLP's output the bias as it is. q, k and v all have biases. ``logit_scale``
    is (heads,)."""

    def __init__(
        self, dim: int, heads: int, window: int, qkv_bias: bool = True, hidden: int = 384
    ) -> None:
        super().__init__(dim, heads, window, qkv_bias)
        self.logit_scale = nn.Parameter(torch.full((heads,), math.log(10.0)))
        self.meta_mlp = _MetaMlp(hidden, heads)

    def offsets(self, window: tuple[int, int], like: Tensor) -> Tensor:
        """((2wh − 1)·(2ww − 1), 2) log-spaced offsets, rows in the v1 table's order."""
        wh, ww = window
        dy = torch.arange(-(wh - 1), wh, dtype=torch.float32)
        dx = torch.arange(-(ww - 1), ww, dtype=torch.float32)
        grid = torch.stack(torch.meshgrid(dy, dx, indexing="ij"), dim=-1)
        grid = torch.sign(grid) * torch.log(1.0 + grid.abs())
        return grid.reshape(-1, 2).to(device=like.device, dtype=like.dtype)

    def position_bias(self, window: tuple[int, int]) -> Tensor:
        weight = self.meta_mlp.fc1.weight
        table = self.meta_mlp(self.offsets(window, weight))  # ((2wh−1)(2ww−1), heads)
        index = self._relative_index(window, window, weight.device)
        n = window[0] * window[1]
        return table[index.reshape(-1)].reshape(n, n, -1).permute(2, 0, 1)

    def queries_keys(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        scale = torch.clamp(self.logit_scale, max=math.log(100.0)).exp().reshape(-1, 1, 1)
        eps = max(1e-12, torch.finfo(q.dtype).tiny)
        return F.normalize(q, dim=-1, eps=eps), F.normalize(k, dim=-1, eps=eps), scale


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
    """x + attn(norm1(x)) inside (shifted) windows; x + mlp(norm2(x)) (v2: x + norm1(attn(x));
    x + norm2(mlp(x)); SwinV2-CR's ``extra_norm`` blocks then norm3 the sum). Maps are
    (B, H, W, C)."""

    def __init__(
        self,
        config: SwinConfig,
        stage: int,
        shifted: bool,
        drop_path: float = 0.0,
        extra_norm: bool = False,
    ) -> None:
        super().__init__()
        dim, window = config.dims[stage], config.window_sizes[stage]
        self.window = window
        self.target_shift = window // 2 if shifted else 0
        self.clamp = config.window_clamp
        self.shift_first = config.shift_first
        self.post_norm = config.version == 2
        self.norm1 = nn.LayerNorm(dim, eps=config.norm_eps)
        heads = config.heads[stage]
        self.attn: _WindowAttentionBase = (
            CrWindowAttention(dim, heads, window, config.qkv_bias, config.cpb_hidden)
            if config.cr
            else CosineWindowAttention(
                dim,
                heads,
                window,
                config.qkv_bias,
                config.pretrained_window(stage),
                config.cpb_hidden,
            )
            if self.post_norm
            else WindowAttention(dim, heads, window, config.qkv_bias)
        )
        self.norm2 = nn.LayerNorm(dim, eps=config.norm_eps)
        self.mlp = SwinMlp(dim, config.hidden_dim(stage), config.activation)
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        self.norm3 = nn.LayerNorm(dim, eps=config.norm_eps) if extra_norm else None

    @property
    def mlp_branch(self) -> nn.Module:
        """The module whose output the residual adds as the MLP branch (v2: the norm after
        the MLP)."""
        return self.norm2 if self.post_norm else self.mlp

    @property
    def attention_branch(self) -> nn.Module | None:
        """The module whose output the residual adds as the attention branch where it is not
        the attention's output projection (v2: the norm after the attention; None in v1)."""
        return self.norm1 if self.post_norm else None

    @property
    def norm1_is_pre_norm(self) -> bool:
        """Whether norm1's output is the block's input normalised, the tokens its attention
        reads (v1); a v2 block's norm1 normalises the attention's output (DESIGN §5)."""
        return not self.post_norm

    def layout(self, grid: tuple[int, int]) -> WindowLayout:
        return block_layout(grid, self.window, self.target_shift, self.clamp, self.shift_first)

    def forward(
        self, x: Tensor, capture: bool = False
    ) -> tuple[Tensor, Tensor | None, WindowLayout]:
        """(B, H, W, C) -> (B, H, W, C), attention (B, windows, heads, n, n) or None, layout."""
        layout = self.layout((x.shape[1], x.shape[2]))
        mask = shift_mask(layout, device=x.device)
        if self.post_norm:
            y, attn = self.attn(partition(x, layout), mask, layout.window, capture=capture)
            x = x + self.drop_path(self.norm1(unpartition(y, layout)))
            x = x + self.drop_path(self.norm2(self.mlp(x)))
            if self.norm3 is not None:  # SwinV2-CR's extra norm of the whole map
                x = self.norm3(x)
            return x, attn, layout
        windows = partition(self.norm1(x), layout)  # (B, windows, n, C)
        y, attn = self.attn(windows, mask, layout.window, capture=capture)
        x = x + self.drop_path(unpartition(y, layout))
        x = x + self.drop_path(self.mlp(self.norm2(x)))
        return x, attn, layout


class PatchMerging(nn.Module):
    """(B, H, W, C) -> (B, ⌈H/2⌉, ⌈W/2⌉, C_out): each 2 × 2 group (padded to even sizes)
    concatenated as x[0::2, 0::2], x[1::2, 0::2], x[0::2, 1::2], x[1::2, 1::2], then LayerNorm
    over the 4·C channels and a Linear without bias (v2: the Linear, then LayerNorm)."""

    def __init__(self, dim: int, out_dim: int, eps: float, norm_after: bool = False) -> None:
        super().__init__()
        self.norm_after = norm_after
        self.norm = nn.LayerNorm(out_dim if norm_after else 4 * dim, eps=eps)
        self.reduction = nn.Linear(4 * dim, out_dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        H, W = x.shape[1], x.shape[2]
        x = F.pad(x, (0, 0, 0, W % 2, 0, H % 2))
        parts = [x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]]
        x = torch.cat(parts, dim=-1)
        if self.norm_after:  # v2
            return self.norm(self.reduction(x))
        return self.reduction(self.norm(x))
