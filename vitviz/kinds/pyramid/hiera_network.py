"""HieraViT: vitviz's Hiera (timm ``hiera_*``), its tokens kept in image (row-major) order.

Conv2d stem (kernel 7, stride 4, padding 3) + a position table (abswin: a global table resized
bicubic + a window table tiled over the mask units) -> blocks; the first block of every stage
after the first max-pools its queries and its residual (a Linear to the doubled width; or,
without ``expand_proj``, [max, mean] of the residual) over 2 × 2 tokens; blocks of
``mask_unit_attn`` stages (and the first block of the stage after one, as timm builds them)
attend within mask units (squares of ``mask_unit`` first-stage tokens, the same image area at
every stage), the others globally; the head reads the LayerNorm of the mean of the last
stage's tokens.

The blocks run on the tokens "unrolled" (timm's order: the 2 × 2 neighbours a pooling takes
in 4 contiguous slabs, a mask unit's tokens sharing the fastest index; ``unrolled_order``), so
every sum runs in the order timm's does and the float32 rounding is the same; after the last
pooling the order is row-major again. A block's attention comes out as computed: (B, heads,
units, t_out, t_in) within mask units, else (B, heads, N_out, N_in), unrolled;
``grid_attention`` lays it out over the row-major grids (B, heads, N_out, N_in), 0 outside a
query's mask unit: the image coordinates the analysis uses.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vitviz.blocks.layers import LayerScale
from vitviz.kinds.pyramid.hiera_config import HieraConfig


@dataclass
class HieraOutput:
    """What one forward pass reports, blocks in order."""

    logits: Tensor  # (B, C); the pooled, normed features (B, D) without a head
    attentions: list[Tensor]  # per block, as computed (see ``grid_attention``); [] if not asked
    stage_grids: list[tuple[int, int]]  # (H_s, W_s) per stage
    block_stages: list[int] = field(default_factory=list)


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
    """On unrolled tokens (B, N, D): queries max-pooled over the ``stride`` slabs (a 2 × 2
    pool), keys and values from every token, attention within each of the ``units`` mask units
    (the fastest token index) or global (``units`` 0). With ``capture`` the probabilities
    softmax((q·d^-½)·kᵀ) are computed explicitly and returned as computed ((B, h, units, t_q,
    t_k) or (B, h, N_q, N_k)); otherwise the fused kernel runs. Same output (B, N/stride, D')."""

    def __init__(self, dim: int, dim_out: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = dim_out // heads
        self.dim_out = dim_out
        self.qkv = nn.Linear(dim, 3 * dim_out)
        self.proj = nn.Linear(dim_out, dim_out)

    def forward(
        self, x: Tensor, stride: int, units: int, capture: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        B, N, _ = x.shape
        h, d = self.heads, self.head_dim
        if units:
            qkv = self.qkv(x).reshape(B, -1, units, 3, h, d).permute(3, 0, 4, 2, 1, 5)
            q, k, v = qkv.unbind(0)  # (B, h, units, t, d)
            if stride > 1:
                q = q.view(B, h, units, stride, -1, d).amax(dim=3)
        else:
            q, k, v = self.qkv(x).reshape(B, N, 3, h, d).permute(2, 0, 3, 1, 4).unbind(0)
            if stride > 1:
                q = q.view(B, h, stride, -1, d).amax(dim=2)
            q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        attn = None
        if capture:
            attn = ((q * d**-0.5) @ k.transpose(-1, -2)).softmax(dim=-1)
            out = attn @ v
        else:
            out = F.scaled_dot_product_attention(q, k, v)
        out = out.transpose(1, 3) if units else out.transpose(1, 2)
        return self.proj(out.reshape(B, -1, self.dim_out)), attn


class HieraMlp(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.act(self.fc1(x)))


class HieraBlock(nn.Module):
    """x' = r(x) + ls1·attn(norm1(x)); x' + ls2·mlp(norm2(x')) on unrolled tokens (B, N, D),
    where r(x) = x, or at a stage's first block the max over the ``stride`` slabs (2 × 2) of
    proj(norm1(x)) (``expand_proj``) or [max, mean] of x over them; ls = 1 without layer
    scale."""

    def __init__(self, dim: int, dim_out: int, heads: int, hidden: int, cfg: HieraConfig) -> None:
        super().__init__()
        eps = cfg.norm_eps
        self.norm1 = nn.LayerNorm(dim, eps=eps)
        self.expands = dim != dim_out
        self.proj = nn.Linear(dim, dim_out) if self.expands and cfg.expand_proj else None
        self.attn = MaskUnitAttention(dim, dim_out, heads)
        self.ls1 = LayerScale(dim_out, 1.0) if cfg.layer_scale else nn.Identity()
        self.norm2 = nn.LayerNorm(dim_out, eps=eps)
        self.mlp = HieraMlp(dim_out, hidden)
        self.ls2 = LayerScale(dim_out, 1.0) if cfg.layer_scale else nn.Identity()

    def forward(
        self, x: Tensor, stride: int, units: int, capture: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        xn = self.norm1(x)
        B, _, D = x.shape
        if self.proj is not None:
            x = self.proj(xn)
            x = x.view(B, stride, -1, x.shape[-1]).amax(dim=1)
        elif self.expands:
            slabs = x.view(B, stride, -1, D)
            x = torch.cat([slabs.amax(dim=1), slabs.mean(dim=1)], dim=-1)
        a, attn = self.attn(xn, stride, units, capture)
        x = x + self.ls1(a)
        return x + self.ls2(self.mlp(self.norm2(x))), attn


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
    block's attention as computed; ``grid_attention`` lays one out over the grids."""

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
                blocks.append(HieraBlock(dim, c.dims[s], c.heads[s], c.mlp_hidden_dims[s], c))
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

    def units(self, grid0: tuple[int, int]) -> int:
        """Mask units on a first-stage grid (the same at every stage)."""
        mu = self.config.mask_unit
        return (grid0[0] // mu[0]) * (grid0[1] // mu[1])

    def embed(self, x: Tensor) -> Tensor:
        """(B, C, H, W) -> (B, N_0, D_0) tokens with their position table, row-major. An
        abswin table is resized to any grid of whole mask units; a plain one fixes the grid."""
        t = self.patch_embed.proj(x)
        _, _, H, W = t.shape
        mu = self.config.mask_unit
        if self.pos_embed_win is not None and (H % mu[0] or W % mu[1]):
            raise ValueError(
                f"a {tuple(x.shape[-2:])} input gives a {H}×{W} grid, not a whole number of "
                f"{mu[0]}×{mu[1]} mask units"
            )
        if self.pos_embed_win is None and self.config.token_grid != (H, W):
            raise ValueError(
                f"a {tuple(x.shape[-2:])} input gives a {H}×{W} grid; this Hiera's position "
                f"table is for {self.config.token_grid} (image size {self.config.image_size})"
            )
        if self.pos_embed_win is not None:
            win = self.pos_embed_win.tile((H // mu[0], W // mu[1]))
            pos = F.interpolate(self.pos_embed, size=(H, W), mode="bicubic", antialias=True)
            pos = (pos + win).flatten(2).transpose(1, 2)
        else:
            pos = self.pos_embed
        return t.flatten(2).transpose(1, 2) + pos

    def forward_features(
        self, x: Tensor, capture_attention: bool = False
    ) -> tuple[Tensor, HieraOutput]:
        """(B, C_in, H, W) -> the last stage's tokens (B, N_S, D), row-major, and the report."""
        t = self.embed(x)
        grid0 = (x.shape[-2] // self.config.patch_stride, x.shape[-1] // self.config.patch_stride)
        q = self.config.q_stride
        S = self.config.num_stages
        t = t[:, unrolled_order(grid0, q, S - 1).to(t.device)]
        report = HieraOutput(logits=t.new_empty(0), attentions=[], stage_grids=[])
        report.stage_grids = [self.stage_grid(s, grid0) for s in range(S)]
        units = self.units(grid0)
        for b, block in enumerate(self.blocks):
            pools, windowed, _, _ = self.block_plan(b, grid0)
            stride = q[0] * q[1] if pools else 1
            t, attn = block(t, stride, units if windowed else 0, capture_attention)
            report.block_stages.append(self.block_stages[b])
            if attn is not None:
                report.attentions.append(attn)
        return t, report  # every unroll consumed: row-major on the last grid

    def forward_head(self, tokens: Tensor) -> Tensor:
        return self.head(tokens)

    def forward(self, x: Tensor) -> Tensor:
        return self.forward_head(self.forward_features(x)[0])

    def forward_explained(self, x: Tensor, capture_attention: bool = True) -> HieraOutput:
        tokens, report = self.forward_features(x, capture_attention)
        report.logits = self.forward_head(tokens)
        return report

    def grid_attention(self, b: int, attn: Tensor, grid0: tuple[int, int]) -> Tensor:
        """Block ``b``'s attention (or its gradient) as computed -> (B, h, N_out, N_in) with
        rows the output grid's tokens and columns the input grid's, both row-major; 0 where a
        key is outside the query's mask unit."""
        pools, windowed, g_in, g_out = self.block_plan(b, grid0)
        S, s = self.config.num_stages, self.block_stages[b]
        q = self.config.q_stride
        p_out = unrolled_order(g_out, q, S - 1 - s).to(attn.device)
        p_in = unrolled_order(g_in, q, S - 1 - (s - 1 if pools else s)).to(attn.device)
        B, h = attn.shape[:2]
        n_out, n_in = p_out.numel(), p_in.numel()
        if windowed:  # unrolled position t·units + w of unit w's t-th token
            units = attn.shape[2]
            w = torch.arange(units, device=attn.device)
            rows = p_out.reshape(-1, units).T  # (units, t_out) grid tokens
            cols = p_in.reshape(-1, units).T  # (units, t_in)
            out = attn.new_zeros(B, h, n_out, n_in)
            r = rows[w][:, :, None].expand(-1, -1, cols.shape[1])
            c = cols[w][:, None, :].expand(-1, rows.shape[1], -1)
            out[:, :, r, c] = attn
            return out
        out = attn.new_zeros(B, h, n_out, n_in)
        out[:, :, p_out[:, None], p_in[None, :]] = attn
        return out
