"""CaitModel: vitviz's CaiT, with each layer's attention captured in the one token layout.

Forward pass (timm's ``Cait``, eval mode), x (B, C, H, W), P = gh·gw patches, D width, H heads::

    p = patch_embed(x) + pos                                  (B, P, D)   patches only
    self-attention block (talking heads), S of them:
        p = p + γ1 · TH(norm1(p));  p = p + γ2 · mlp(norm2(p))
    c = cls_token                                             (B, 1, D)
    class-attention block, K of them:
        u = [c, p];  c = c + γ1 · CA(norm1(u));  c = c + γ2 · mlp(norm2(c))
    logits = head(norm([c, p])[:, 0])

Talking heads (Shazeer et al. 2020): scores s_h = (q_h·scale) k_hᵀ (P × P), mixed over heads by a
Linear before the softmax and by another after it::

    A_h = Σ_g W_w[h, g] · softmax_keys(Σ_f W_l[g, f] s_f + b_l[g]) + b_w[h]      (P, P)

and output_h = A_h V_h. The captured matrix of a self-attention layer is this A (post-softmax,
post-``proj_w``): the one that multiplies V. It is not a probability distribution (its rows sum
to Σ_g W_w[h, g] + P·b_w[h] and entries can be negative). Class attention: the CLS's
softmax((q_cls·scale) Kᵀ) over [CLS, patches], (1, 1 + P) per head, plain softmax.

Captured layout. Every layer's attention is handed over as (B, H, N, N) over the tokens
[CLS, patches] (N = 1 + P), so all layers share one layout; the rows of tokens a layer does not
update are what the layer does to them, the identity:

    self-attention layer:  E[1:, 1:] = A (patch rows over patch keys), E[0] = e_CLS (the CLS
                           token is not in the block: it passes unchanged), E[1:, 0] = 0;
    class-attention layer: E[0] = the CLS row, E[1:] = identity (the patches pass unchanged).

The forward pass computes with E itself (E[:, :, 1:, 1:] @ V in a self-attention layer,
E[:, :, :1] @ V in a class-attention layer), so ∂y/∂E is the true gradient on the computed
entries and exactly 0 on the identity rows and zero column. ``vitviz.kinds.cait`` says how each
method reads this.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from vitviz.blocks.class_attention import ClassAttention
from vitviz.blocks.layers import DropPath, LayerScale, Mlp
from vitviz.kinds.cait.config import CaitConfig
from vitviz.kinds.late_cls_network import LateClsNetwork


def _mix_heads(linear: nn.Linear, a: Tensor) -> Tensor:
    """(B, H, Q, K) -> (B, H, Q, K) with the heads mixed by ``linear`` (H -> H)."""
    return linear(a.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class TalkingHeadsAttention(nn.Module):
    """Self-attention over the patches with heads mixed before and after the softmax.

    (B, P, D) -> (B, P, D), and with ``capture`` the embedded (B, H, 1 + P, 1 + P) matrix (see
    the module docstring), else None."""

    def __init__(self, config: CaitConfig) -> None:
        super().__init__()
        D, H = config.dim, config.heads
        self.heads = H
        self.head_dim = D // H
        self.scale = self.head_dim**-0.5
        self.qkv = nn.Linear(D, 3 * D, bias=config.qkv_bias)
        self.proj_l = nn.Linear(H, H)
        self.proj_w = nn.Linear(H, H)
        self.attn_drop = nn.Dropout(config.attn_drop_rate)
        self.proj = nn.Linear(D, D)
        self.proj_drop = nn.Dropout(config.drop_rate)

    def forward(self, x: Tensor, capture: bool = False) -> tuple[Tensor, Tensor | None]:
        B, P, D = x.shape
        qkv = self.qkv(x).reshape(B, P, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0] * self.scale, qkv[1], qkv[2]  # (B, H, P, hd)
        scores = _mix_heads(self.proj_l, q @ k.transpose(-2, -1))  # (B, H, P, P)
        a = _mix_heads(self.proj_w, scores.softmax(dim=-1))
        embedded = None
        if capture:
            embedded = a.new_zeros(B, self.heads, P + 1, P + 1)
            embedded[:, :, 0, 0] = 1.0  # the CLS token passes unchanged
            embedded[:, :, 1:, 1:] = a
            a = embedded[:, :, 1:, 1:]  # the forward pass computes with the captured tensor
        out = (self.attn_drop(a) @ v).transpose(1, 2).reshape(B, P, D)
        return self.proj_drop(self.proj(out)), embedded


class SelfAttentionBlock(nn.Module):
    """(B, 1 + P, D) [CLS, patches] -> the same, the patches updated (talking heads, LayerScale),
    the CLS token carried unchanged."""

    def __init__(self, config: CaitConfig, drop_path: float = 0.0) -> None:
        super().__init__()
        D, eps, ls = config.dim, config.norm_eps, float(config.layer_scale_init or 0.0)
        self.norm1 = nn.LayerNorm(D, eps=eps)
        self.attn = TalkingHeadsAttention(config)
        self.norm2 = nn.LayerNorm(D, eps=eps)
        self.mlp = Mlp(config)
        self.ls1, self.ls2 = LayerScale(D, ls), LayerScale(D, ls)
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()

    def forward(self, x: Tensor, capture: bool = False) -> tuple[Tensor, Tensor | None]:
        p = x[:, 1:]
        y, attn = self.attn(self.norm1(p), capture=capture)
        p = p + self.drop_path(self.ls1(y))
        p = p + self.drop_path(self.ls2(self.mlp(self.norm2(p))))
        return torch.cat([x[:, :1], p], dim=1), attn


class ClassAttentionBlock(nn.Module):
    """(B, 1 + P, D) [CLS, patches] -> the same, the CLS updated (class attention over every
    token, then its MLP), the patches carried unchanged."""

    def __init__(self, config: CaitConfig) -> None:
        super().__init__()
        D, eps, ls = config.dim, config.norm_eps, float(config.layer_scale_init or 0.0)
        self.norm1 = nn.LayerNorm(D, eps=eps)
        self.attn = ClassAttention(config)
        self.norm2 = nn.LayerNorm(D, eps=eps)
        self.mlp = Mlp(config.replace(mlp_hidden_dim=config.class_hidden_dim))
        self.ls1, self.ls2 = LayerScale(D, ls), LayerScale(D, ls)

    def forward(self, x: Tensor, capture: bool = False) -> tuple[Tensor, Tensor | None]:
        c = x[:, :1]
        y, attn = self.attn(self.norm1(x), capture=capture)
        c = c + self.ls1(y)
        c = c + self.ls2(self.mlp(self.norm2(c)))
        return torch.cat([c, x[:, 1:]], dim=1), attn


class CaitModel(LateClsNetwork):
    """vitviz's CaiT: ``blocks`` holds the self-attention blocks, then the class-attention
    blocks (one list: layer l of the analysis is ``blocks[l]``)."""

    model_kind = "cait"  # vitviz.kinds: the CaiT kind explains it

    config: CaitConfig

    def make_blocks(self, config: CaitConfig) -> list[nn.Module]:
        """The self-attention blocks, then the class-attention blocks."""
        S = config.self_depth
        return [SelfAttentionBlock(config, config.drop_path_rate) for _ in range(S)] + [
            ClassAttentionBlock(config) for _ in range(config.class_depth)
        ]
