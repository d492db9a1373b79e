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

from collections.abc import Callable

import torch
from torch import Tensor, nn

from vitviz.blocks.class_attention import ClassAttention
from vitviz.blocks.layers import DropPath, LayerScale, Mlp, PatchEmbed
from vitviz.blocks.posembed import resample_grid_embedding
from vitviz.blocks.vit import ViTOutput, run_blocks
from vitviz.kinds.cait.config import CaitConfig


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


class CaitModel(nn.Module):
    """vitviz's CaiT: ``blocks`` holds the self-attention blocks, then the class-attention
    blocks (one list: layer l of the analysis is ``blocks[l]``)."""

    model_kind = "cait"  # vitviz.kinds: the CaiT kind explains it

    def __init__(self, config: CaitConfig) -> None:
        super().__init__()
        config.validate()
        self.config = config
        D = config.dim
        self.patch_embed = PatchEmbed(config)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, D))
        self.pos_embed = nn.Parameter(torch.zeros(1, config.num_patches, D))
        self.pos_drop = nn.Dropout(config.drop_rate)
        S = config.self_depth
        self.blocks = nn.ModuleList(
            [SelfAttentionBlock(config, config.drop_path_rate) for _ in range(S)]
            + [ClassAttentionBlock(config) for _ in range(config.class_depth)]
        )
        self.norm = nn.LayerNorm(D, eps=config.norm_eps)
        self.head_drop = nn.Dropout(config.drop_rate)
        C = config.num_classes
        self.head = nn.Linear(D, C) if C else nn.Identity()
        self.init_weights()

    def init_weights(self) -> None:
        """Truncated-normal (std 0.02) Linear weights, position table and CLS, zero biases."""
        if any(p.is_meta for p in self.parameters()):
            return
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)

    @property
    def num_prefix_tokens(self) -> int:
        return 1

    def embed(self, x: Tensor) -> tuple[Tensor, tuple[int, int]]:
        """(B, C, H, W) -> (B, 1 + P, D) [CLS, patches + positions], and the grid. The position
        table is resampled (vitviz's bicubic) for a grid other than the trained one; timm's
        CaiT takes only its trained size."""
        patches, grid = self.patch_embed(x)
        pos = resample_grid_embedding(
            self.pos_embed, self.config.grid_size, grid, method=self.config.pos_embed_interp
        )
        patches = self.pos_drop(patches + pos)
        cls = self.cls_token.expand(patches.shape[0], -1, -1)
        return torch.cat([cls, patches], dim=1), grid

    def forward_explained(
        self,
        x: Tensor,
        capture_attention: bool = True,
        hidden_states: bool = False,
        attention_sink: Callable[[int, Tensor], None] | None = None,
        recompute_blocks: bool = False,
    ) -> ViTOutput:
        """Logits (B, C) and each layer's embedded attention L × (B, H, 1 + P, 1 + P) (or handed
        to ``attention_sink(layer, attn)``), block outputs L × (B, 1 + P, D) when asked.
        ``recompute_blocks``: each block is run again in the backward pass."""
        tokens, grid = self.embed(x)
        tokens, attentions, hidden = run_blocks(
            self.blocks, tokens, capture_attention, hidden_states, attention_sink, recompute_blocks
        )
        logits = self.head(self.head_drop(self.norm(tokens)[:, 0]))
        return ViTOutput(logits, attentions, hidden, grid, 1)

    def forward(self, x: Tensor) -> Tensor:
        """(B, C, H, W) -> (B, classes) logits."""
        return self.forward_explained(x, capture_attention=False).logits
