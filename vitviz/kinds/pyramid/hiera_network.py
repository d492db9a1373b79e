"""HieraViT: vitviz's Hiera (timm ``hiera_*``), its tokens kept in image (row-major) order.

Conv2d stem (kernel 7, stride 4, padding 3) + a position table (abswin: a global table resized
bicubic + a window table tiled over the mask units) -> blocks; the first block of every stage
after the first max-pools its queries and its residual (a Linear to the doubled width) over
2 × 2 tokens; blocks of ``mask_unit_attn`` stages (and the first block of the stage after one,
as timm builds them) attend within mask units (squares of
``mask_unit`` first-stage tokens, the same image area at every stage), the others globally; the
head reads the LayerNorm of the mean of the last stage's tokens.

timm keeps the tokens "unrolled" (the 2 × 2 neighbours to be pooled and the mask units
contiguous); vitviz keeps them row-major on each stage's grid and masks the keys outside a
query's mask unit, the same numbers. ``unrolled_order`` gives timm's order, so
``library_outputs`` hands the attention back in timm's own layout for the load-time check.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vitviz.kinds.pyramid.hiera_config import HieraConfig


@dataclass
class HieraOutput:
    """What one forward pass reports, blocks in order."""

    logits: Tensor  # (B, C); the pooled, normed features (B, D) without a head
    attentions: list[Tensor]  # per block (B, heads, N_out, N_in), rows = queries; [] if not asked
    stage_grids: list[tuple[int, int]]  # (H_s, W_s) per stage
    block_stages: list[int] = field(default_factory=list)


def pool2(x: Tensor, stride: tuple[int, int]) -> Tensor:
    """(B, ..., H, W, C) -> (B, ..., H/sy, W/sx, C): the max over each sy × sx square."""
    *lead, H, W, C = x.shape
    sy, sx = stride
    return x.reshape(*lead, H // sy, sy, W // sx, sx, C).amax(dim=(-4, -2))


def unrolled_order(grid: tuple[int, int], stride: tuple[int, int], steps: int) -> Tensor:
    """(H·W,) long: position i of timm's unrolled order holds row-major token order[i].

    Each of ``steps`` unrolls splits every current grid into its sy × sx phases (the phase the
    slowest index), so the tokens a later 2 × 2 max-pool takes come in ``stride`` contiguous
    slabs and, after all steps, the tokens of one mask unit share their last index."""
    H, W = grid
    sy, sx = stride
    idx = torch.arange(H * W).reshape(1, H, W)
    for _ in range(steps):
        n, h, w = idx.shape
        idx = idx.reshape(n, h // sy, sy, w // sx, sx).permute(0, 2, 4, 1, 3)
        idx = idx.reshape(n * sy * sx, h // sy, w // sx)
    return idx.reshape(-1)


def window_ids(grid: tuple[int, int], unit: tuple[int, int]) -> Tensor:
    """(H·W,) the mask unit (row-major over units) of each row-major token of ``grid``."""
    H, W = grid
    rows = torch.arange(H) // unit[0]
    cols = torch.arange(W) // unit[1]
    return (rows[:, None] * (W // unit[1]) + cols[None, :]).reshape(-1)


class MaskUnitAttention(nn.Module):
    """Queries (max-pooled 2 × 2 where ``pool``) from the block's output grid, keys and values
    from every token of its input grid, restricted to the query's mask unit where ``windowed``.
    With ``capture`` the probabilities softmax((q/√d)·kᵀ) (0 outside the unit) are computed
    explicitly and returned (B, heads, N_out, N_in); else the fused kernel runs."""

    def __init__(self, dim: int, dim_out: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = dim_out // heads
        self.qkv = nn.Linear(dim, 3 * dim_out)
        self.proj = nn.Linear(dim_out, dim_out)

    def forward(
        self,
        x: Tensor,
        pool: tuple[int, int] | None,
        allowed: Tensor | None,
        capture: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """x (B, H, W, D) -> (B, H', W', D_out) and the attention or None; ``allowed``
        (N_out, N_in) bool: which keys each query may see (None: all)."""
        B, H, W, _ = x.shape
        qkv = self.qkv(x).reshape(B, H, W, 3, self.heads, self.head_dim)
        qkv = qkv.permute(3, 0, 4, 1, 2, 5)  # (3, B, h, H, W, d)
        q, k, v = qkv.unbind(0)
        if pool is not None:
            q = pool2(q, pool)
        Ho, Wo = q.shape[2], q.shape[3]
        q = q.reshape(B, self.heads, Ho * Wo, self.head_dim)
        k = k.reshape(B, self.heads, H * W, self.head_dim)
        v = v.reshape(B, self.heads, H * W, self.head_dim)
        attn = None
        if capture:
            scores = (q * self.head_dim**-0.5) @ k.transpose(-2, -1)
            if allowed is not None:
                scores = scores.masked_fill(~allowed.to(scores.device), float("-inf"))
            attn = scores.softmax(dim=-1)
            out = attn @ v
        else:
            mask = None if allowed is None else allowed.to(q.device)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        out = out.transpose(1, 2).reshape(B, Ho, Wo, -1)
        return self.proj(out), attn


class HieraMlp(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.act(self.fc1(x)))


class HieraBlock(nn.Module):
    """x' = pool(proj(norm1(x))) (a stage's first block; else x) + attn(norm1(x));
    x' + mlp(norm2(x')) on (B, H, W, D) tokens."""

    def __init__(self, dim: int, dim_out: int, heads: int, hidden: int, eps: float) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=eps)
        self.proj = nn.Linear(dim, dim_out) if dim != dim_out else None
        self.attn = MaskUnitAttention(dim, dim_out, heads)
        self.norm2 = nn.LayerNorm(dim_out, eps=eps)
        self.mlp = HieraMlp(dim_out, hidden)

    def forward(
        self,
        x: Tensor,
        pool: tuple[int, int] | None,
        allowed: Tensor | None,
        capture: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        xn = self.norm1(x)
        if self.proj is not None:
            x = self.proj(xn)
            if pool is not None:
                x = pool2(x, pool)
        a, attn = self.attn(xn, pool, allowed, capture)
        x = x + a
        return x + self.mlp(self.norm2(x)), attn


class HieraHead(nn.Module):
    """LayerNorm of the mean token, then the classifier (timm's ClNormMlpClassifierHead)."""

    def __init__(self, dim: int, classes: int, eps: float) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim, eps=eps)
        self.fc = nn.Linear(dim, classes) if classes else nn.Identity()

    def forward(self, tokens: Tensor) -> Tensor:
        return self.fc(self.norm(tokens.mean(dim=1)))


class HieraViT(nn.Module):
    """Hiera: ``forward`` gives logits (fused attention), ``forward_explained`` also each
    block's attention (B, heads, N_out, N_in) over row-major grids."""

    model_kind = "pyramid"

    def __init__(self, config: HieraConfig) -> None:
        super().__init__()
        config.validate()
        self.config = config
        c = config
        self.patch_embed = nn.Module()
        self.patch_embed.proj = nn.Conv2d(
            c.in_channels, c.dims[0], c.patch_kernel, c.patch_stride, c.patch_padding
        )
        H, W = c.token_grid
        if c.abs_win_pos:
            self.pos_embed = nn.Parameter(torch.zeros(1, c.dims[0], *c.global_pos_size))
            self.pos_embed_win = nn.Parameter(torch.zeros(1, c.dims[0], *c.mask_unit))
        else:
            self.pos_embed = nn.Parameter(torch.zeros(1, H * W, c.dims[0]))
            self.pos_embed_win = None
        blocks, stages = [], []
        dim = c.dims[0]
        for s, depth in enumerate(c.depths):
            for _ in range(depth):
                blocks.append(
                    HieraBlock(dim, c.dims[s], c.heads[s], c.mlp_hidden_dims[s], c.norm_eps)
                )
                stages.append(s)
                dim = c.dims[s]
        self.blocks = nn.ModuleList(blocks)
        self.block_stages = stages
        self.head = HieraHead(c.dims[-1], c.num_classes, c.norm_eps)

    def stage_grid(self, stage: int, grid: tuple[int, int] | None = None) -> tuple[int, int]:
        H, W = grid or self.config.token_grid
        q = self.config.q_stride
        return H // q[0] ** stage, W // q[1] ** stage

    def block_plan(self, b: int, grid0: tuple[int, int]) -> tuple[bool, bool, tuple, tuple]:
        """Block ``b`` on a first-stage grid: (pools, windowed, input grid, output grid)."""
        s = self.block_stages[b]
        first = b == 0 or self.block_stages[b - 1] != s
        pools = first and s > 0
        g_out = self.stage_grid(s, grid0)
        g_in = self.stage_grid(s - 1, grid0) if pools else g_out
        # timm's first block of a stage keeps the previous stage's kind of attention
        windowed = self.config.mask_unit_attn[s - 1 if first and s > 0 else s]
        return pools, windowed, g_in, g_out

    def allowed(self, b: int, grid0: tuple[int, int]) -> Tensor | None:
        """(N_out, N_in) bool: the keys of each query's mask unit (None: global attention)."""
        pools, windowed, g_in, g_out = self.block_plan(b, grid0)
        if not windowed:
            return None
        s = self.block_stages[b]
        q, mu = self.config.q_stride, self.config.mask_unit
        unit_out = (mu[0] // q[0] ** s, mu[1] // q[1] ** s)
        s_in = s - 1 if pools else s
        unit_in = (mu[0] // q[0] ** s_in, mu[1] // q[1] ** s_in)
        return window_ids(g_out, unit_out)[:, None] == window_ids(g_in, unit_in)[None, :]

    def embed(self, x: Tensor) -> Tensor:
        """(B, C, H, W) -> (B, H_0, W_0, D_0) tokens with their position table."""
        t = self.patch_embed.proj(x)
        B, D, H, W = t.shape
        if self.config.token_grid != (H, W):
            raise ValueError(
                f"a {tuple(x.shape[-2:])} input gives a {H}×{W} grid; this Hiera's position "
                f"table is for {self.config.token_grid} (image size {self.config.image_size})"
            )
        if self.pos_embed_win is not None:
            mu = self.config.mask_unit
            win = self.pos_embed_win.tile((H // mu[0], W // mu[1]))
            pos = F.interpolate(self.pos_embed, size=(H, W), mode="bicubic", antialias=True)
            pos = (pos + win).flatten(2).transpose(1, 2)
        else:
            pos = self.pos_embed
        return (t.flatten(2).transpose(1, 2) + pos).reshape(B, H, W, D)

    def forward_features(
        self, x: Tensor, capture_attention: bool = False
    ) -> tuple[Tensor, HieraOutput]:
        """(B, C_in, H, W) -> the last stage's tokens (B, N_S, D) and the report."""
        t = self.embed(x)
        grid0 = (int(t.shape[1]), int(t.shape[2]))
        report = HieraOutput(logits=t.new_empty(0), attentions=[], stage_grids=[])
        report.stage_grids = [self.stage_grid(s, grid0) for s in range(self.config.num_stages)]
        q = self.config.q_stride
        for b, block in enumerate(self.blocks):
            pools = self.block_plan(b, grid0)[0]
            allowed = self.allowed(b, grid0)
            t, attn = block(t, q if pools else None, allowed, capture_attention)
            report.block_stages.append(self.block_stages[b])
            if attn is not None:
                report.attentions.append(attn)
        return t.reshape(t.shape[0], -1, t.shape[-1]), report

    def forward_head(self, tokens: Tensor) -> Tensor:
        return self.head(tokens)

    def forward(self, x: Tensor) -> Tensor:
        return self.forward_head(self.forward_features(x)[0])

    def forward_explained(self, x: Tensor, capture_attention: bool = True) -> HieraOutput:
        tokens, report = self.forward_features(x, capture_attention)
        report.logits = self.forward_head(tokens)
        return report

    def library_layout(self, b: int, attn: Tensor, grid0: tuple[int, int]) -> Tensor:
        """Block ``b``'s attention (B, h, N_out, N_in) in timm's layout: (B, h, units, t_out,
        t_in) over each mask unit's tokens (windowed), else (B, h, N_out, N_in), both in timm's
        unrolled token order."""
        pools, windowed, g_in, g_out = self.block_plan(b, grid0)
        S, s = self.config.num_stages, self.block_stages[b]
        q = self.config.q_stride
        p_out = unrolled_order(g_out, q, S - 1 - s)
        p_in = unrolled_order(g_in, q, S - 1 - (s - 1 if pools else s))
        a = attn[:, :, p_out][:, :, :, p_in]
        if not windowed:
            return a
        mu = self.config.mask_unit
        units = (grid0[0] // mu[0]) * (grid0[1] // mu[1])
        B, h = a.shape[:2]
        a = a.reshape(B, h, -1, units, p_in.numel() // units, units)  # (.., t_o, w_o, t_i, w_i)
        u = torch.arange(units)
        return a[:, :, :, u, :, u].permute(1, 2, 0, 3, 4)  # (B, h, units, t_out, t_in)
