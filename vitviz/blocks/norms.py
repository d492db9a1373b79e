"""The blocks' norm: LayerNorm, or RMSNorm (timm's ``RmsNorm``), by ``ViTConfig.norm``."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class RMSNorm(nn.Module):
    """(..., width) -> x · rsqrt(mean(x²) + eps) · weight over the last dimension, in timm's
    order of operations (its ``rms_norm``): the same float32 rounding as the library's."""

    def __init__(self, width: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.normalized_shape = (width,)
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x: Tensor) -> Tensor:
        v = x.pow(2).mean(dim=-1, keepdim=True)
        return x * torch.rsqrt(v + self.eps) * self.weight


def make_norm(kind: str, width: int, eps: float) -> nn.Module:
    """A LayerNorm (``kind`` "layernorm") or an RMSNorm ("rmsnorm") over ``width`` features."""
    if kind == "rmsnorm":
        return RMSNorm(width, eps)
    return nn.LayerNorm(width, eps=eps)
