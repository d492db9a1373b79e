"""A block of several parallel branches ("Three things everyone should know about Vision
Transformers", timm's ``ParallelThingsBlock``): P pre-norm attention branches summed into the
residual, then P pre-norm MLP branches summed into it.

    x = x + Σ_i ls_i(attn_i(norm_i(x)));   x = x + Σ_i ls'_i(mlp_i(norm'_i(x)))

Each branch has its own norm, qkv and proj (and LayerScale). The layer's attention is its
branches' heads side by side, (B, P·H, N, N): branch i's heads are heads i·H .. i·H + H - 1.
They are computed as one attention over the P·H heads (each head's softmax is its own, so the
probabilities are each branch's), which keeps the captured tensor on the path to the logits
(the gradient methods read its gradient). timm's tensor names are kept (``attns.I.norm``,
``attns.I.attn.qkv``, ``attns.I.attn.proj``, ``attns.I.ls.gamma``, ``ffns.I.norm``,
``ffns.I.mlp.fc1``, ...), and its order of operations (the branches stacked, then summed).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vitviz.blocks.config import ViTConfig
from vitviz.blocks.layers import Attention, DropPath, LayerScale, Mlp
from vitviz.blocks.norms import make_norm


class AttentionBranch(nn.Module):
    """One attention branch: ``norm``, ``attn`` (vitviz's Attention), ``ls``."""

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.norm = make_norm(config.norm, config.dim, config.norm_eps)
        self.attn = Attention(config)
        ls = config.layer_scale_init
        self.ls = LayerScale(config.dim, ls) if ls is not None else nn.Identity()

    def qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """x (B, N, D) -> norm(x) and q, k, v (B, H, N, hd), q and k after their norms."""
        a = self.attn
        B, N, _ = x.shape
        h = self.norm(x)
        q, k, v = a.qkv(h).reshape(B, N, 3, a.heads, a.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        return h, a.q_norm(q), a.k_norm(k), v

    def out(self, heads: Tensor) -> Tensor:
        """The branch's heads' outputs (B, H, N, hd) -> ls(proj(norm(concat))) (B, N, D)."""
        a = self.attn
        B, _, N, _ = heads.shape
        concat = a.norm(heads.transpose(1, 2).reshape(B, N, a.attn_dim))
        return self.ls(a.proj_drop(a.proj(concat)))


class MlpBranch(nn.Module):
    """One MLP branch: ``norm``, ``mlp``, ``ls``."""

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.norm = make_norm(config.norm, config.dim, config.norm_eps)
        self.mlp = Mlp(config)
        ls = config.layer_scale_init
        self.ls = LayerScale(config.dim, ls) if ls is not None else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        return self.ls(self.mlp(self.norm(x)))


class BranchedBlock(nn.Module):
    """(B, N, D) -> (B, N, D) and the attention (B, P·H, N, N) when ``capture``, else None."""

    def __init__(self, config: ViTConfig, drop_path: float = 0.0) -> None:
        super().__init__()
        self.attns = nn.ModuleList(AttentionBranch(config) for _ in range(config.branches))
        self.ffns = nn.ModuleList(MlpBranch(config) for _ in range(config.branches))
        self.heads = config.heads * config.branches  # the layer's heads, branch after branch
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()

    def joint_qkv(self, x: Tensor) -> tuple[list[Tensor], Tensor, Tensor, Tensor]:
        """x (B, N, D) -> each branch's norm(x) and q, k, v of every branch's heads side by
        side (B, P·H, N, hd)."""
        parts = [branch.qkv(x) for branch in self.attns]
        h, q, k, v = zip(*parts, strict=True)
        return list(h), torch.cat(q, dim=1), torch.cat(k, dim=1), torch.cat(v, dim=1)

    def branch_outputs(self, heads: Tensor) -> list[Tensor]:
        """Every head's output (B, P·H, N, hd) -> each branch's output (B, N, D)."""
        chunks = heads.chunk(len(self.attns), dim=1)
        return [self.drop_path(b.out(c)) for b, c in zip(self.attns, chunks, strict=True)]

    def forward(
        self,
        x: Tensor,
        capture: bool = False,
        rope: tuple[Tensor, Tensor] | None = None,
        grid: tuple[int, int] | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """``grid``: the patch grid, unused (blocks of several branches take no relative
        position bias)."""
        if rope is not None:
            raise ValueError("blocks of several branches take no rotary positions")
        first = self.attns[0].attn
        _h, q, k, v = self.joint_qkv(x)
        attn: Tensor | None = None
        if capture:
            attn = ((q * first.scale) @ k.transpose(-2, -1)).softmax(dim=-1)  # (B, P·H, N, N)
            heads = first.attn_drop(attn) @ v
        else:
            p = first.attn_drop.p if self.training else 0.0
            heads = F.scaled_dot_product_attention(q, k, v, dropout_p=p)
        x = x + torch.stack(self.branch_outputs(heads)).sum(dim=0)
        x = x + torch.stack([self.drop_path(f(x)) for f in self.ffns]).sum(dim=0)
        return x, attn
