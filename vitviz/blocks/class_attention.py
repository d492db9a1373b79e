"""Class attention (Touvron et al. 2021): only the CLS token queries [CLS, patches], and only
the CLS is updated: the block of the models whose last layers are class-attention blocks. Its
attention is captured in the one token layout, (B, H, N, N) over
[CLS, patches]: the CLS row, the identity below (the patches pass unchanged).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from vitviz.blocks.config import ViTConfig

# ViTConfig options a model with class-attention blocks has fixed, and the value it has (its
# config refuses anything else by name; one without a learnt position table: "pos_embed" too).
FIXED = {
    "class_token": True,
    "distill_token": False,
    "num_register_tokens": 0,
    "rel_pos_bias": False,
    "no_embed_class": True,
    "pos_embed": "learned",
    "global_pool": "token",
    "fc_norm": False,
    "pre_norm": False,
    "head_hidden_dim": None,
    "norm_first": True,
    "final_norm": True,
    "pos_embed_prefix": None,
    "attn_head_dim": None,
    "pool_include_prefix": False,
    "patch_embed": "conv",
    "patch_norm_pre": False,
    "patch_norm_post": False,
}


class ClassAttention(nn.Module):
    """The CLS queries [CLS, patches]: (B, N, D) normed tokens -> (B, 1, D) the CLS's update,
    and with ``capture`` the embedded (B, H, N, N) matrix (CLS row; identity below), else None."""

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        D = config.dim
        self.heads = config.heads
        self.head_dim = D // config.heads
        self.scale = self.head_dim**-0.5
        self.q = nn.Linear(D, D, bias=config.qkv_bias)
        self.k = nn.Linear(D, D, bias=config.qkv_bias)
        self.v = nn.Linear(D, D, bias=config.qkv_bias)
        self.attn_drop = nn.Dropout(config.attn_drop_rate)
        self.proj = nn.Linear(D, D)
        self.proj_drop = nn.Dropout(config.drop_rate)

    def forward(self, u: Tensor, capture: bool = False) -> tuple[Tensor, Tensor | None]:
        B, N, D = u.shape
        H, hd = self.heads, self.head_dim
        q = self.q(u[:, 0]).reshape(B, 1, H, hd).permute(0, 2, 1, 3)  # (B, H, 1, hd)
        k = self.k(u).reshape(B, N, H, hd).permute(0, 2, 1, 3)
        v = self.v(u).reshape(B, N, H, hd).permute(0, 2, 1, 3)
        a = ((q * self.scale) @ k.transpose(-2, -1)).softmax(dim=-1)  # (B, H, 1, N)
        embedded = None
        if capture:
            eye = torch.eye(N, dtype=a.dtype, device=a.device)
            embedded = eye.expand(B, H, N, N).clone()  # the patches pass unchanged
            embedded[:, :, :1] = a
            a = embedded[:, :, :1]
        out = (self.attn_drop(a) @ v).transpose(1, 2).reshape(B, 1, D)
        return self.proj_drop(self.proj(out)), embedded
