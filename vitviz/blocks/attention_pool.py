"""Multi-head attention pooling (MAP): a learnt probe token attends to the final tokens.

The pooling head of SigLIP's image tower and of timm's ViTs with ``global_pool='map'``::

    q = W_q·probe + b_q,  k = W_k·x + b_k,  v = W_v·x + b_v           (per head, width hd)
    a = softmax(q·kᵀ / √hd)                                            (H, N): the probe's row
    h = W_o·concat_h(a·v) + b_o;    pooled = h + mlp(LayerNorm(h))     (B, D)

The q, k and v projections are held packed as ``in_proj_weight`` (3D, D) and ``in_proj_bias``
(3D,) (nn.MultiheadAttention's layout; timm's separate ``q`` and ``kv`` Linears are the same
rows). ``attend`` also hands back the probe's attention, which explanations start from where a
model has no CLS token to read (the ViT kind's ``ProbeAnalysis``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vitviz.blocks.layers import make_activation


class AttentionPool(nn.Module):
    """(B, N, D) tokens -> (B, D) pooled, from one probe token's multi-head attention over them
    plus a residual MLP on its LayerNorm; ``attend`` also gives the probe's attention (B, H, N)."""

    def __init__(self, dim: int, heads: int, hidden: int, eps: float, activation: str) -> None:
        super().__init__()
        self.heads = heads
        self.probe = nn.Parameter(torch.zeros(1, 1, dim))
        self.in_proj_weight = nn.Parameter(torch.zeros(3 * dim, dim))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * dim))
        self.out_proj = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim, eps=eps)
        self.fc1, self.fc2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)
        self.act = make_activation(activation)

    def attend(self, tokens: Tensor) -> tuple[Tensor, Tensor]:
        """(B, N, D) -> pooled (B, D) and the probe's attention (B, H, N), in the graph."""
        B, N, D = tokens.shape
        H = self.heads
        wq, wk, wv = self.in_proj_weight.chunk(3)
        bq, bk, bv = self.in_proj_bias.chunk(3)
        q = F.linear(self.probe, wq, bq).reshape(1, H, 1, D // H)  # (1, H, 1, hd)
        k = F.linear(tokens, wk, bk).reshape(B, N, H, D // H).transpose(1, 2)  # (B, H, N, hd)
        v = F.linear(tokens, wv, bv).reshape(B, N, H, D // H).transpose(1, 2)
        attn = ((q * (D // H) ** -0.5) @ k.transpose(-2, -1))[:, :, 0].softmax(dim=-1)  # (B, H, N)
        h = self.out_proj((attn[:, :, None] @ v).reshape(B, D))  # (B, D)
        return h + self.fc2(self.act(self.fc1(self.norm(h)))), attn

    def forward(self, tokens: Tensor) -> Tensor:
        return self.attend(tokens)[0]
