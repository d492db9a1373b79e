"""The parallel block of "Scaling Vision Transformers to 22B" (timm's ``ParallelScalingBlock``):
attention and MLP side by side on one norm, their inputs from one fused Linear.

    h = in_norm(x);   [m, q, k, v] = split(in_proj(h))          (hidden, D, D, D)
    a = attn_out_proj(softmax(q_n·k_nᵀ/√d)·v),  q_n, k_n = q_norm(q), k_norm(k) per head
    y = a + mlp_out_proj(act(m + mlp_bias))                      (mlp_bias: when qkv has none)
    out = x + ls(y)

timm's tensor names are kept (``in_norm``, ``in_proj``, ``mlp_bias``, ``q_norm``, ``k_norm``,
``attn_out_proj``, ``mlp_out_proj``, ``ls.gamma``), and its order of operations.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vitviz.blocks.config import ViTConfig
from vitviz.blocks.layers import DropPath, LayerScale, make_activation
from vitviz.blocks.norms import make_norm


class ParallelBlock(nn.Module):
    """(B, N, D) -> (B, N, D) and the attention (B, heads, N, N) when ``capture``, else None."""

    def __init__(self, config: ViTConfig, drop_path: float = 0.0) -> None:
        super().__init__()
        D, hidden = config.dim, config.hidden_dim
        self.heads, self.head_dim = config.heads, config.head_dim
        self.scale = self.head_dim**-0.5
        self.split = [hidden, D, D, D]
        self.in_norm = make_norm(config.norm, D, config.norm_eps)
        self.in_proj = nn.Linear(D, hidden + 3 * D, bias=config.qkv_bias)
        self.mlp_bias = None if config.qkv_bias else nn.Parameter(torch.zeros(hidden))
        qk = config.qk_norm
        hd, eps = self.head_dim, config.norm_eps
        self.q_norm = make_norm(config.norm, hd, eps) if qk else nn.Identity()
        self.k_norm = make_norm(config.norm, hd, eps) if qk else nn.Identity()
        self.attn_drop = nn.Dropout(config.attn_drop_rate)
        self.mlp_drop = nn.Dropout(config.drop_rate)
        self.mlp_act = make_activation(config.activation)
        self.attn_out_proj = nn.Linear(D, D)
        self.mlp_out_proj = nn.Linear(hidden, D)
        ls = config.layer_scale_init
        self.ls = LayerScale(D, ls) if ls is not None else nn.Identity()
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()

    @property
    def mlp_branch(self) -> nn.Module:
        """The module whose output is the MLP branch as the block adds it (before LayerScale)."""
        return self.mlp_out_proj

    @property
    def norm1(self) -> nn.Module:
        """The norm whose output the block's attention reads (token Grad-CAM's features)."""
        return self.in_norm

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """x (B, N, D) -> in_norm(x), the MLP's pre-activation (B, N, hidden) and q, k, v
        (B, heads, N, hd), q and k after their norms."""
        B, N, _ = x.shape
        h = self.in_norm(x)
        m, q, k, v = torch.split(self.in_proj(h), self.split, dim=-1)
        if self.mlp_bias is not None:
            m = m + self.mlp_bias
        shape = (B, N, self.heads, self.head_dim)
        q = self.q_norm(q.view(shape)).transpose(1, 2)
        k = self.k_norm(k.view(shape)).transpose(1, 2)
        return h, m, q, k, v.view(shape).transpose(1, 2)

    def forward(
        self,
        x: Tensor,
        capture: bool = False,
        rope: tuple[Tensor, Tensor] | None = None,
        grid: tuple[int, int] | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """``grid``: the patch grid, unused (parallel blocks take no relative position bias)."""
        if rope is not None:
            raise ValueError("parallel blocks take no rotary positions")
        B, N, D = x.shape
        _h, m, q, k, v = self.project(x)
        attn: Tensor | None = None
        if capture:
            attn = ((q * self.scale) @ k.transpose(-2, -1)).softmax(dim=-1)  # (B, nh, N, N)
            out = self.attn_drop(attn) @ v
        else:
            p = self.attn_drop.p if self.training else 0.0
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=p)
        a = out.transpose(1, 2).reshape(B, N, D)
        m = self.mlp_drop(self.mlp_act(m))
        y = self.attn_out_proj(a) + self.mlp_out_proj(m)
        return x + self.drop_path(self.ls(y)), attn
