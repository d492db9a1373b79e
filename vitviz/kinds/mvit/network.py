"""MViT: vitviz's Multiscale Vision Transformer v2 (Li et al. 2022), a kind beside the ViT and
the pyramids (DESIGN §3).

Stem Conv2d -> [CLS] + patches (+ an absolute position table where the checkpoint has one) ->
stages of pre-norm blocks whose attention pools its queries, keys and values on the grid
(``PooledAttention``: per head a depthwise conv, then a LayerNorm over the head's channels),
adds the decomposed relative position bias to the logits and, with residual pooling, the
pooled queries to each head's output. A stage's first block pools its queries (the grid
shrinks) and its shortcut with them (max pool), and changes the width. The final LayerNorm and
the head on the mean of the patch tokens or on the CLS token. Module names are timm's, so a
timm state dict is this network's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from vitviz.kinds.mvit.config import BlockPlan, MViTConfig


@dataclass
class MViTOutput:
    """What one forward pass reports, blocks in order (stage by stage)."""

    logits: Tensor  # (B, C); without a head what the head would read
    attentions: list[Tensor]  # per block (B, heads, P + Nq, P + Nk): queries × pooled keys


def _pool_layers(
    width: int, kernel: tuple[int, int], stride: tuple[int, int], eps: float
) -> tuple[nn.Module | None, nn.Module | None]:
    """A head's depthwise pooling conv and its LayerNorm (None, None where kernel and stride are
    both 1: timm skips the pooling)."""
    if math.prod(kernel) == 1 and math.prod(stride) == 1:
        return None, None
    pad = (kernel[0] // 2, kernel[1] // 2)
    conv = nn.Conv2d(width, width, kernel, stride=stride, padding=pad, groups=width, bias=False)
    return conv, nn.LayerNorm(width, eps=eps)


class PooledAttention(nn.Module):
    """(B, P + N, C) on the (h, w) grid -> (B, P + Nq, att_dim) and the probabilities
    (B, heads, P + Nq, P + Nk)."""

    def __init__(self, plan: BlockPlan, config: MViTConfig) -> None:
        super().__init__()
        self.heads = plan.heads
        self.att_dim = plan.att_dim
        self.head_dim = plan.att_dim // plan.heads
        self.scale = self.head_dim**-0.5
        self.prefix = config.num_prefix_tokens
        self.plan = plan
        self.residual_pooling = config.residual_pooling
        self.qkv = nn.Linear(plan.dim_in, 3 * plan.att_dim, bias=config.qkv_bias)
        self.proj = nn.Linear(plan.att_dim, plan.att_dim)
        k, eps = config.kernel_qkv, config.norm_eps
        self.pool_q, self.norm_q = _pool_layers(self.head_dim, k, plan.stride_q, eps)
        self.pool_k, self.norm_k = _pool_layers(self.head_dim, k, plan.stride_kv, eps)
        self.pool_v, self.norm_v = _pool_layers(self.head_dim, k, plan.stride_kv, eps)
        if config.rel_pos:
            self.rel_pos_h = nn.Parameter(torch.zeros(plan.table_size, self.head_dim))
            self.rel_pos_w = nn.Parameter(torch.zeros(plan.table_size, self.head_dim))
        else:
            self.rel_pos_h = self.rel_pos_w = None

    def _pool(
        self, t: Tensor, conv: nn.Module | None, norm: nn.Module | None, grid: tuple[int, int]
    ) -> tuple[Tensor, tuple[int, int]]:
        """(B, heads, P + N, d) -> pooled on the grid per head (prefix kept), then normed."""
        if conv is None:
            return t, grid
        B, H, _, d = t.shape
        prefix, cells = t[:, :, : self.prefix], t[:, :, self.prefix :]
        cells = cells.reshape(B * H, grid[0], grid[1], d).permute(0, 3, 1, 2)
        cells = conv(cells)
        out_grid = (int(cells.shape[2]), int(cells.shape[3]))
        cells = cells.reshape(B, H, d, -1).transpose(2, 3)
        t = torch.cat([prefix, cells], dim=2)
        assert norm is not None
        return norm(t), out_grid

    def _relative(
        self, logits: Tensor, q: Tensor, gq: tuple[int, int], gk: tuple[int, int]
    ) -> Tensor:
        """The logits (B, heads, P + Nq, P + Nk) with q·R_h and q·R_w added between patches:
        R_h[i, j] = rel_pos_h[d_h(i, j)], the distances scaled to the finer of the two grids."""
        assert self.rel_pos_h is not None and self.rel_pos_w is not None
        P = self.prefix
        B, H = q.shape[:2]

        def distances(nq: int, nk: int) -> Tensor:
            rq, rk = max(nk / nq, 1.0), max(nq / nk, 1.0)
            ar = torch.arange
            d = ar(nq, device=q.device).unsqueeze(-1) * rq - ar(nk, device=q.device) * rk
            return (d + (nk - 1) * rk).long()

        Rh = self.rel_pos_h[distances(gq[0], gk[0])]  # (qh, kh, d)
        Rw = self.rel_pos_w[distances(gq[1], gk[1])]  # (qw, kw, d)
        rq = q[:, :, P:].reshape(B, H, gq[0], gq[1], -1)
        rel_h = torch.einsum("byhwc,hkc->byhwk", rq, Rh)
        rel_w = torch.einsum("byhwc,wkc->byhwk", rq, Rw)
        cells = logits[:, :, P:, P:].view(B, H, gq[0], gq[1], gk[0], gk[1])
        cells = (cells + rel_h.unsqueeze(-1) + rel_w.unsqueeze(-2)).reshape(
            B, H, gq[0] * gq[1], gk[0] * gk[1]
        )
        if not P:
            return cells
        lower = torch.cat([logits[:, :, P:, :P], cells], dim=-1)
        return torch.cat([logits[:, :, :P], lower], dim=2)

    def forward(self, x: Tensor, grid: tuple[int, int]) -> tuple[Tensor, Tensor]:
        B, N, _ = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)  # (B, heads, P + N, d)
        q, gq = self._pool(q, self.pool_q, self.norm_q, grid)
        k, gk = self._pool(k, self.pool_k, self.norm_k, grid)
        v, _ = self._pool(v, self.pool_v, self.norm_v, grid)
        logits = (q * self.scale) @ k.transpose(-2, -1)
        if self.rel_pos_h is not None:
            logits = self._relative(logits, q, gq, gk)
        attn = logits.softmax(dim=-1)
        out = attn @ v
        if self.residual_pooling:
            out = out + q  # residual pooling: the pooled queries, per head
        out = out.transpose(1, 2).reshape(B, -1, self.att_dim)
        return self.proj(out), attn


class MViTMlp(nn.Module):
    """fc1 -> GELU -> fc2 (timm's ``Mlp``)."""

    def __init__(self, dim: int, hidden: int, out: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, out)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.act(self.fc1(x)))


class MViTBlock(nn.Module):
    """(B, P + N, dim_in) on the block's input grid -> ((B, P + Nq, dim_out) on its query grid,
    the attention's probabilities)."""

    def __init__(self, plan: BlockPlan, config: MViTConfig) -> None:
        super().__init__()
        self.plan = plan
        self.prefix = config.num_prefix_tokens
        eps = config.norm_eps
        change = plan.dim_in != plan.dim_out
        self.norm1 = nn.LayerNorm(plan.dim_in, eps=eps)
        self.shortcut_proj_attn = (
            nn.Linear(plan.dim_in, plan.dim_out) if change and config.expand_attn else None
        )
        s = plan.stride_q
        if math.prod(s) > 1:
            kernel = tuple(v + 1 if v > 1 else v for v in s)
            pad = tuple(v // 2 for v in kernel)
            self.shortcut_pool_attn: nn.Module | None = nn.MaxPool2d(kernel, s, pad)
        else:
            self.shortcut_pool_attn = None
        self.attn = PooledAttention(plan, config)
        self.norm2 = nn.LayerNorm(plan.att_dim, eps=eps)
        self.shortcut_proj_mlp = (
            nn.Linear(plan.dim_in, plan.dim_out) if change and not config.expand_attn else None
        )
        self.mlp = MViTMlp(plan.att_dim, int(plan.att_dim * config.mlp_ratio), plan.dim_out)

    def _shortcut_pool(self, x: Tensor) -> Tensor:
        if self.shortcut_pool_attn is None:
            return x
        P, (h, w) = self.prefix, self.plan.grid_in
        prefix, cells = x[:, :P], x[:, P:]
        B, _, C = cells.shape
        cells = self.shortcut_pool_attn(cells.reshape(B, h, w, C).permute(0, 3, 1, 2))
        return torch.cat([prefix, cells.reshape(B, C, -1).transpose(1, 2)], dim=1)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        normed = self.norm1(x)
        # the shortcut is the input itself without a projection (timm's, as the original)
        shortcut = x if self.shortcut_proj_attn is None else self.shortcut_proj_attn(normed)
        shortcut = self._shortcut_pool(shortcut)
        out, attn = self.attn(normed, self.plan.grid_in)
        x = shortcut + out
        normed = self.norm2(x)
        shortcut = x if self.shortcut_proj_mlp is None else self.shortcut_proj_mlp(normed)
        return shortcut + self.mlp(normed), attn


class MViTStage(nn.Module):
    """A stage's blocks (timm's ``stages.{s}.blocks``)."""

    def __init__(self, plans: list[BlockPlan], config: MViTConfig) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(MViTBlock(p, config) for p in plans)


class MViTPatchEmbed(nn.Module):
    """(B, C_in, H, W) -> (B, D_0, h_0, w_0): the stem conv (timm's ``patch_embed.proj``)."""

    def __init__(self, config: MViTConfig) -> None:
        super().__init__()
        self.proj = nn.Conv2d(
            config.in_channels,
            config.dims[0],
            config.patch_kernel,
            stride=config.patch_size,
            padding=config.patch_padding,
        )


class MViTHead(nn.Module):
    """timm's ``head`` (its ``fc``; dropout is the identity in evaluation)."""

    def __init__(self, dim: int, classes: int) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, classes)


class MViT(nn.Module):
    """vitviz's MViTv2; ``forward`` (B, C, H, W) -> (B, classes) (without a head: the pooled
    features the head would read)."""

    model_kind = "mvit"

    def __init__(self, config: MViTConfig) -> None:
        super().__init__()
        config.validate()
        self.config = config
        D0 = config.dims[0]
        self.patch_embed = MViTPatchEmbed(config)
        P = config.num_prefix_tokens
        self.cls_token = nn.Parameter(torch.zeros(1, 1, D0)) if P else None
        if config.use_abs_pos:
            n = math.prod(config.stem_grid) + P
            self.pos_embed: nn.Parameter | None = nn.Parameter(torch.zeros(1, n, D0))
        else:
            self.pos_embed = None
        plans = config.blocks()
        self.stages = nn.ModuleList(
            MViTStage([p for p in plans if p.stage == s], config) for s in range(config.num_stages)
        )
        final = plans[-1].dim_out
        self.norm = nn.LayerNorm(final, eps=config.norm_eps)
        self.head = MViTHead(final, config.num_classes) if config.num_classes else None

    @property
    def blocks(self) -> list[MViTBlock]:
        """Every block in order, stage by stage."""
        return [b for stage in self.stages for b in stage.blocks]  # type: ignore[misc]

    def embed(self, x: Tensor) -> Tensor:
        """(B, C, H, W) -> (B, P + N_0, D_0): the stem's patches row-major after the CLS."""
        x = self.patch_embed.proj(x).flatten(2).transpose(1, 2)
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        if self.pos_embed is not None:
            x = x + self.pos_embed
        return x

    def forward_head(self, tokens: Tensor) -> Tensor:
        """(B, P + N, C) last-block tokens -> logits: the final norm, the mean of the patches
        (or the CLS token), the head."""
        x = self.norm(tokens)
        P = self.config.num_prefix_tokens
        x = x[:, 0] if self.config.global_pool == "token" else x[:, P:].mean(dim=1)
        return x if self.head is None else self.head.fc(x)

    def forward_explained(self, x: Tensor) -> MViTOutput:
        tokens = self.embed(x)
        attentions = []
        for block in self.blocks:
            tokens, attn = block(tokens)
            attentions.append(attn)
        return MViTOutput(self.forward_head(tokens), attentions)

    def forward(self, x: Tensor) -> Tensor:
        return self.forward_explained(x).logits
