"""Building blocks of the ViT: patch embedding, attention with explicit capture, MLP, block."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vitviz.model.config import ViTConfig
from vitviz.model.rotary import apply_rotary
from vitviz.model.swiglu import SwiGLU


class PatchEmbed(nn.Module):
    """Patches -> tokens: (B, C, H, W) -> (B, gh·gw, dim), row-major patches.

    ``patch_embed="conv"``: Conv2d with kernel = stride = patch. ``"linear"``: each patch flattened
    in (p1 p2 c) order (einops ``b c (h p1) (w p2) -> b (h w) (p1 p2 c)``), optionally
    LayerNorm-ed (``patch_norm_pre``), then a Linear. ``patch_norm_post``: LayerNorm after either.
    """

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.patch_size = config.patch_size
        self.linear = config.patch_embed == "linear"
        p = config.patch_size
        patch_dim = config.in_channels * p * p
        eps = config.norm_eps
        self.norm_pre: nn.Module = (
            nn.LayerNorm(patch_dim, eps=eps) if config.patch_norm_pre else nn.Identity()
        )
        self.proj: nn.Module = (
            nn.Linear(patch_dim, config.dim)
            if self.linear
            else nn.Conv2d(config.in_channels, config.dim, kernel_size=p, stride=p)
        )
        self.norm: nn.Module = (
            nn.LayerNorm(config.dim, eps=eps) if config.patch_norm_post else nn.Identity()
        )

    def forward(self, x: Tensor) -> tuple[Tensor, tuple[int, int]]:
        B, C, H, W = x.shape
        p = self.patch_size
        if H % p or W % p:
            raise ValueError(f"input {H}×{W} is not divisible by the patch size {p}")
        grid = (H // p, W // p)
        if self.linear:
            x = x.reshape(B, C, grid[0], p, grid[1], p).permute(0, 2, 4, 3, 5, 1)
            x = self.proj(self.norm_pre(x.reshape(B, grid[0] * grid[1], p * p * C)))
        else:
            x = self.proj(x).flatten(2).transpose(1, 2)  # (B, dim, gh, gw) -> (B, gh·gw, dim)
        return self.norm(x), grid


def relative_position_index(grid: tuple[int, int]) -> Tensor:
    """(N, N) long, N = 1 + gh·gw (CLS first): the row of the bias table each query-key pair
    reads (BEiT's layout). Patch pairs: (Δrow + gh − 1)·(2gw − 1) + (Δcol + gw − 1); the last
    three rows of the table: CLS to a patch, a patch to CLS, CLS to itself."""
    gh, gw = grid
    rows, cols = torch.meshgrid(torch.arange(gh), torch.arange(gw), indexing="ij")
    r, c = rows.flatten(), cols.flatten()
    dr = r[:, None] - r[None, :] + gh - 1
    dc = c[:, None] - c[None, :] + gw - 1
    distances = (2 * gh - 1) * (2 * gw - 1)
    index = torch.empty(1 + gh * gw, 1 + gh * gw, dtype=torch.long)
    index[1:, 1:] = dr * (2 * gw - 1) + dc
    index[0, :] = distances  # CLS to every token
    index[:, 0] = distances + 1  # every token to CLS
    index[0, 0] = distances + 2  # CLS to itself
    return index


class Attention(nn.Module):
    """Multi-head self-attention with one fused qkv Linear.

    With ``capture=True`` the probabilities softmax(QKᵀ/√d) are computed explicitly and returned,
    shape (B, heads, N, N), rows = queries; otherwise the fused scaled_dot_product_attention runs
    and ``None`` is returned. Both paths give the same output.
    """

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.heads = config.heads
        self.head_dim = config.head_dim
        self.attn_dim = config.attn_dim
        self.scale = self.head_dim**-0.5
        self.qkv = nn.Linear(config.dim, 3 * self.attn_dim, bias=config.qkv_bias)
        self.attn_drop = nn.Dropout(config.attn_drop_rate)
        self.proj = nn.Linear(self.attn_dim, config.dim)
        self.proj_drop = nn.Dropout(config.drop_rate)
        eps = config.norm_eps  # sub-LN: a norm on the heads' output before proj (EVA-02)
        self.norm = nn.LayerNorm(self.attn_dim, eps=eps) if config.attn_norm else nn.Identity()
        self.prefix, self.rope_half = config.num_prefix_tokens, config.rope_half
        self.relative_position_bias_table: nn.Parameter | None = None
        if config.rel_pos_bias:
            gh, gw = config.grid_size
            rows = (2 * gh - 1) * (2 * gw - 1) + 3
            self.relative_position_bias_table = nn.Parameter(torch.zeros(rows, self.heads))
            self.rel_grid = (gh, gw)
        self._rel_index: Tensor | None = None  # made on the table's device when first needed

    def position_bias(self, n: int) -> Tensor | None:
        """(heads, n, n) added to the attention scores (BEiT's relative position bias), or None.
        ValueError for a token count other than the grid the table was learnt on."""
        table = self.relative_position_bias_table
        if table is None:
            return None
        index = self._rel_index
        if index is None or index.device != table.device:  # not a buffer: a meta-built model
            index = self._rel_index = relative_position_index(self.rel_grid).to(table.device)
        if n != index.shape[0]:
            raise ValueError(
                f"a relative position bias learnt on {index.shape[0] - 1} patches: this input "
                f"gives {n - 1}; analyse it at the model's own input size"
            )
        return table[index.view(-1)].view(n, n, -1).permute(2, 0, 1)

    def forward(
        self, x: Tensor, capture: bool = False, rope: tuple[Tensor, Tensor] | None = None
    ) -> tuple[Tensor, Tensor | None]:
        """``rope``: this layer's rotary (sin, cos) tables for the patch tokens, or None."""
        B, N, _ = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)  # each (B, nh, N, hd)
        q, k = apply_rotary(q, k, rope, self.prefix, self.rope_half)
        bias = self.position_bias(N)
        attn: Tensor | None = None
        if capture:
            scores = (q * self.scale) @ k.transpose(-2, -1)  # (B, nh, N, N)
            attn = (scores if bias is None else scores + bias).softmax(dim=-1)
            out = self.attn_drop(attn) @ v  # (B, nh, N, hd)
        else:
            p = self.attn_drop.p if self.training else 0.0
            mask = None if bias is None else bias.to(q.dtype)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        out = self.norm(out.transpose(1, 2).reshape(B, N, self.attn_dim))
        return self.proj_drop(self.proj(out)), attn


def make_activation(name: str) -> nn.Module:
    if name == "gelu":
        return nn.GELU()
    if name == "gelu_tanh":
        return nn.GELU(approximate="tanh")
    if name == "quick_gelu":
        return QuickGELU()
    if name == "relu":
        return nn.ReLU()
    raise ValueError(f"unknown activation {name!r}")


class QuickGELU(nn.Module):
    """x·sigmoid(1.702x), the GELU approximation of CLIP."""

    def forward(self, x: Tensor) -> Tensor:
        return x * torch.sigmoid(1.702 * x)


class Mlp(nn.Module):
    """Linear -> activation -> dropout -> Linear -> dropout: (B, N, dim) -> (B, N, dim)."""

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.fc1 = nn.Linear(config.dim, config.hidden_dim)
        self.act = make_activation(config.activation)
        self.norm: nn.Module = (  # sub-LN before fc2 (EVA's scale_mlp)
            nn.LayerNorm(config.hidden_dim, eps=config.norm_eps)
            if config.mlp_norm
            else nn.Identity()
        )
        self.fc2 = nn.Linear(config.hidden_dim, config.dim)
        self.drop = nn.Dropout(config.drop_rate)

    def forward(self, x: Tensor) -> Tensor:
        return self.drop(self.fc2(self.norm(self.drop(self.act(self.fc1(x))))))


class LayerScale(nn.Module):
    """Per-channel learned scale (CaiT / DINOv2): x·gamma."""

    def __init__(self, dim: int, init: float) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.full((dim,), float(init)))

    def forward(self, x: Tensor) -> Tensor:
        return x * self.gamma


class DropPath(nn.Module):
    """Stochastic depth: drops the whole residual branch per sample while training."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        keep = 1.0 - self.p
        mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)
        return x * mask / keep


class Block(nn.Module):
    """Encoder block. Pre-norm (default): x + attn(norm1(x)); x + mlp(norm2(x)).

    Post-norm (``norm_first=False``, nn.TransformerEncoderLayer's default):
    norm1(x + attn(x)); norm2(x + mlp(x)).
    """

    def __init__(self, config: ViTConfig, drop_path: float = 0.0) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(config.dim, eps=config.norm_eps)
        self.attn = Attention(config)
        self.norm2 = nn.LayerNorm(config.dim, eps=config.norm_eps)
        self.mlp = SwiGLU(config) if config.swiglu else Mlp(config)
        ls = config.layer_scale_init
        self.ls1 = LayerScale(config.dim, ls) if ls is not None else nn.Identity()
        self.ls2 = LayerScale(config.dim, ls) if ls is not None else nn.Identity()
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        self.norm_first = config.norm_first

    def forward(
        self, x: Tensor, capture: bool = False, rope: tuple[Tensor, Tensor] | None = None
    ) -> tuple[Tensor, Tensor | None]:
        if not self.norm_first:
            y, attn = self.attn(x, capture=capture, rope=rope)
            x = self.norm1(x + self.drop_path(self.ls1(y)))
            x = self.norm2(x + self.drop_path(self.ls2(self.mlp(x))))
            return x, attn
        y, attn = self.attn(self.norm1(x), capture=capture, rope=rope)
        x = x + self.drop_path(self.ls1(y))
        x = x + self.drop_path(self.ls2(self.mlp(self.norm2(x))))
        return x, attn
