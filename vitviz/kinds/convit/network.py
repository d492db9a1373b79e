"""ConvitModel: vitviz's ConViT, with each layer's attention captured in one token layout.

Forward pass (timm's ``ConVit``, eval mode), x (B, C, H, W), P = g·g patches (a square grid),
D width, H heads::

    p = patch_embed(x) + pos                                  (B, P, D)   patches only
    GPSA block, S of them:   p = p + GPSA(norm1(p));  p = p + mlp(norm2(p))
    t = [cls_token, p]                                        (B, 1 + P, D)
    plain block, L − S of them: t = t + MHSA(norm1(t));  t = t + mlp(norm2(t))
    logits = head(norm(t)[:, 0])

Gated positional self-attention (DESIGN §5): per head h, with patch i's grid offsets to patch j
r_ij = (x_j − x_i, y_j − y_i, (x_j − x_i)² + (y_j − y_i)²)::

    C_h = softmax_keys((q_h·scale) k_hᵀ)              content attention (P, P)
    Π_h = softmax_keys(pos_proj(r)_h)                 positional attention (P, P)
    A_h = (1 − σ(g_h))·C_h + σ(g_h)·Π_h,  then A_h / rowsum(A_h)     (timm normalises again)

and output_h = A_h V_h (q, k from ``qk``, v from ``v``). A is what the layer shows.

Captured layout. Every layer's attention is handed over as (B, H, N, N) over [CLS, patches]
(N = 1 + P): a GPSA layer's E[1:, 1:] = A, E[0] = e_CLS (the CLS token is not in the block: it
passes unchanged), E[1:, 0] = 0; a plain layer's is its softmax over every token. The forward
pass computes with E itself, so ∂y/∂E is the true gradient on the computed entries and 0 on
the identity row and the zero column.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from vitviz.blocks.layers import Attention, DropPath, Mlp
from vitviz.kinds.convit.config import ConvitConfig
from vitviz.kinds.late_cls_network import LateClsNetwork


def grid_offsets(side: int) -> Tensor:
    """(P, P, 3) r_ij = (x_j − x_i, y_j − y_i, squared distance) on a side × side grid,
    patches row-major."""
    y, x = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")
    x, y = x.reshape(-1).float(), y.reshape(-1).float()
    dx = x[None, :] - x[:, None]
    dy = y[None, :] - y[:, None]
    return torch.stack([dx, dy, dx**2 + dy**2], dim=-1)


class GatedPositionalAttention(nn.Module):
    """GPSA over the patches: (B, P, D) -> (B, P, D), and with ``capture`` the embedded
    (B, H, 1 + P, 1 + P) matrix (see the module docstring), else None."""

    def __init__(self, config: ConvitConfig) -> None:
        super().__init__()
        D, H = config.dim, config.heads
        self.heads = H
        self.head_dim = D // H
        self.scale = self.head_dim**-0.5
        self.qk = nn.Linear(D, 2 * D, bias=config.qkv_bias)
        self.v = nn.Linear(D, D, bias=config.qkv_bias)
        self.pos_proj = nn.Linear(3, H)
        self.gating_param = nn.Parameter(torch.ones(H))
        self.attn_drop = nn.Dropout(config.attn_drop_rate)
        self.proj = nn.Linear(D, D)
        self.proj_drop = nn.Dropout(config.drop_rate)

    def mixture(self, x: Tensor) -> Tensor:
        """(B, P, D) normed patches -> A (B, H, P, P), the gated, renormalised mixture."""
        B, P, _ = x.shape
        side = round(P**0.5)
        if side * side != P:
            raise ValueError(f"a ConViT's GPSA needs a square patch grid, got {P} patches")
        qk = self.qk(x).reshape(B, P, 2, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k = qk[0], qk[1]
        content = ((q @ k.transpose(-2, -1)) * self.scale).softmax(dim=-1)
        offsets = grid_offsets(side).to(device=x.device, dtype=x.dtype)
        position = self.pos_proj(offsets).permute(2, 0, 1).softmax(dim=-1)  # (H, P, P)
        gate = torch.sigmoid(self.gating_param).view(1, -1, 1, 1)
        a = (1.0 - gate) * content + gate * position
        return a / a.sum(dim=-1, keepdim=True)

    def forward(self, x: Tensor, capture: bool = False) -> tuple[Tensor, Tensor | None]:
        B, P, D = x.shape
        a = self.mixture(x)
        embedded = None
        if capture:
            embedded = a.new_zeros(B, self.heads, P + 1, P + 1)
            embedded[:, :, 0, 0] = 1.0  # the CLS token passes unchanged
            embedded[:, :, 1:, 1:] = a
            a = embedded[:, :, 1:, 1:]  # the forward pass computes with the captured tensor
        v = self.v(x).reshape(B, P, self.heads, self.head_dim).transpose(1, 2)
        out = (self.attn_drop(a) @ v).transpose(1, 2).reshape(B, P, D)
        return self.proj_drop(self.proj(out)), embedded


class GpsaBlock(nn.Module):
    """(B, 1 + P, D) [CLS, patches] -> the same, the patches updated (GPSA, MLP), the CLS
    carried unchanged (it joins the blocks after these)."""

    def __init__(self, config: ConvitConfig, drop_path: float = 0.0) -> None:
        super().__init__()
        D, eps = config.dim, config.norm_eps
        self.norm1 = nn.LayerNorm(D, eps=eps)
        self.attn = GatedPositionalAttention(config)
        self.norm2 = nn.LayerNorm(D, eps=eps)
        self.mlp = Mlp(config)
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()

    def forward(self, x: Tensor, capture: bool = False) -> tuple[Tensor, Tensor | None]:
        p = x[:, 1:]
        y, attn = self.attn(self.norm1(p), capture=capture)
        p = p + self.drop_path(y)
        p = p + self.drop_path(self.mlp(self.norm2(p)))
        return torch.cat([x[:, :1], p], dim=1), attn


class PlainBlock(nn.Module):
    """(B, 1 + P, D) -> the same: pre-norm multi-head self-attention over every token, MLP."""

    def __init__(self, config: ConvitConfig, drop_path: float = 0.0) -> None:
        super().__init__()
        D, eps = config.dim, config.norm_eps
        self.norm1 = nn.LayerNorm(D, eps=eps)
        self.attn = Attention(config)
        self.norm2 = nn.LayerNorm(D, eps=eps)
        self.mlp = Mlp(config)
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()

    def forward(self, x: Tensor, capture: bool = False) -> tuple[Tensor, Tensor | None]:
        y, attn = self.attn(self.norm1(x), capture=capture)
        x = x + self.drop_path(y)
        x = x + self.drop_path(self.mlp(self.norm2(x)))
        return x, attn


class ConvitModel(LateClsNetwork):
    """vitviz's ConViT: ``blocks`` holds the GPSA blocks, then the plain ones (layer l of the
    analysis is ``blocks[l]``)."""

    model_kind = "convit"  # vitviz.kinds: the ConViT kind explains it

    config: ConvitConfig

    def make_blocks(self, config: ConvitConfig) -> list[nn.Module]:
        """The GPSA blocks, then the plain ones."""
        rate = config.drop_path_rate
        return [
            GpsaBlock(config, rate) if i < config.gpsa_depth else PlainBlock(config, rate)
            for i in range(config.depth)
        ]
