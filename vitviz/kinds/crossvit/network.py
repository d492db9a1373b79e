"""CrossViTNet: vitviz's CrossViT (Chen et al. 2021), a kind of its own (DESIGN §3).

Per branch b: the image (branch 1's resized bicubic to its size, as timm's ``scale_image``) ->
patch embedding (a Conv2d of kernel = stride = patch, or the ``_dagger_`` three-conv stem) ->
[CLS, patches row-major] + the position table. Each multi-scale block: each branch's pre-norm
ViT blocks (``vitviz.blocks.layers.Block``), then per branch b its CLS projected to the other
branch's width (LayerNorm, GELU, Linear), a cross-attention block (the CLS alone as the query
over [that CLS, the other branch's patches], a residual on the CLS) and the result projected
back; b's tokens go on as [that CLS, b's own patches]. A final LayerNorm per branch, a head
per branch; the logits are their mean. Module names are timm's, so timm's state dict is this
network's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vitviz.blocks.config import ViTConfig
from vitviz.blocks.layers import Block
from vitviz.kinds.crossvit.config import BRANCHES, CrossViTConfig


@dataclass
class CrossViTOutput:
    """What one forward pass reports, attention layers in ``config.layers()`` order."""

    logits: Tensor  # (B, C); without a head the branches' pooled features side by side
    attentions: list[Tensor] = field(default_factory=list)
    # self layer: (B, heads, 1 + N_b, 1 + N_b); cross layer of b: (B, heads, 1, 1 + N_other)


def stem(config: CrossViTConfig, branch: int) -> nn.Module:
    """(B, C_in, S, S) -> (B, D, h, w): one conv of the patch size, or the dagger's three."""
    c, d, p = config.in_channels, config.dims[branch], config.patch_sizes[branch]
    if not config.multi_conv:
        return nn.Conv2d(c, d, p, stride=p)
    second = (3, 3, 0) if p == 12 else (3, 2, 1)  # (kernel, stride, padding)
    third = (3, 1, 1) if p == 12 else (3, 2, 1)
    return nn.Sequential(
        nn.Conv2d(c, d // 4, 7, stride=4, padding=3),
        nn.ReLU(),
        nn.Conv2d(d // 4, d // 2, second[0], stride=second[1], padding=second[2]),
        nn.ReLU(),
        nn.Conv2d(d // 2, d, third[0], stride=third[1], padding=third[2]),
    )


class PatchEmbed(nn.Module):
    """A branch's stem under timm's name (``patch_embed.{b}.proj``)."""

    def __init__(self, config: CrossViTConfig, branch: int) -> None:
        super().__init__()
        self.proj = stem(config, branch)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(x).flatten(2).transpose(1, 2)  # (B, N, D)


class CrossAttention(nn.Module):
    """The CLS (token 0) as the one query over every token: (B, 1 + N, D) -> (B, 1, D)."""

    def __init__(self, dim: int, heads: int, qkv_bias: bool) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.scale = self.head_dim**-0.5
        self.wq = nn.Linear(dim, dim, bias=qkv_bias)
        self.wk = nn.Linear(dim, dim, bias=qkv_bias)
        self.wv = nn.Linear(dim, dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """-> (the projected output (B, 1, D), the attention (B, heads, 1, 1 + N))."""
        B, N, D = x.shape
        q = self.wq(x[:, :1]).reshape(B, 1, self.heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).reshape(B, N, self.heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).reshape(B, N, self.heads, self.head_dim).transpose(1, 2)
        attn = ((q @ k.transpose(-2, -1)) * self.scale).softmax(dim=-1)  # timm's order
        out = (attn @ v).transpose(1, 2).reshape(B, 1, D)
        return self.proj(out), attn


class CrossAttentionBlock(nn.Module):
    """CLS + cross-attention(LayerNorm(tokens)): (B, 1 + N, D) -> ((B, 1, D), attention)."""

    def __init__(self, dim: int, heads: int, qkv_bias: bool, eps: float) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=eps)
        self.attn = CrossAttention(dim, heads, qkv_bias)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        out, attn = self.attn(self.norm1(x))
        return x[:, :1] + out, attn


def projection(dim_in: int, dim_out: int, eps: float) -> nn.Sequential:
    """LayerNorm, GELU, Linear (timm's ``projs`` and ``revert_projs``)."""
    return nn.Sequential(nn.LayerNorm(dim_in, eps=eps), nn.GELU(), nn.Linear(dim_in, dim_out))


def block_config(config: CrossViTConfig, branch: int) -> ViTConfig:
    """The ViT block settings of ``branch``'s blocks."""
    return ViTConfig(
        image_size=config.branch_sizes[branch],
        patch_size=config.patch_sizes[branch],
        num_classes=0,
        dim=config.dims[branch],
        depth=1,
        heads=config.heads[branch],
        mlp_hidden_dim=config.mlp_hidden_dims[branch],
        qkv_bias=config.qkv_bias,
        norm_eps=config.norm_eps,
    )


class MultiScaleBlock(nn.Module):
    """Each branch's blocks, then the CLS exchange (timm's ``MultiScaleBlock``)."""

    def __init__(self, config: CrossViTConfig, depths: tuple[int, ...]) -> None:
        super().__init__()
        D, eps = config.dims, config.norm_eps
        self.blocks = nn.ModuleList(
            nn.Sequential(*(Block(block_config(config, b)) for _ in range(depths[b])))
            for b in range(BRANCHES)
        )
        self.projs = nn.ModuleList(projection(D[b], D[1 - b], eps) for b in range(BRANCHES))
        self.fusion = nn.ModuleList(
            CrossAttentionBlock(D[1 - b], config.heads[1 - b], config.qkv_bias, eps)
            for b in range(BRANCHES)
        )
        self.revert_projs = nn.ModuleList(projection(D[1 - b], D[b], eps) for b in range(BRANCHES))

    def forward(self, xs: list[Tensor], attentions: list[Tensor] | None) -> list[Tensor]:
        """[(B, 1 + N_b, D_b)] -> the same; each layer's attention appended to ``attentions``
        (None: the fused path)."""
        capture = attentions is not None
        outs = []
        for b, x in enumerate(xs):
            for block in self.blocks[b]:
                x, attn = block(x, capture=capture)
                if attentions is not None:
                    attentions.append(attn)
            outs.append(x)
        fused = []
        for b in range(BRANCHES):
            other = outs[1 - b]
            cls = self.projs[b](outs[b][:, :1])
            cls, attn = self.fusion[b](torch.cat((cls, other[:, 1:]), dim=1))
            if attentions is not None:
                attentions.append(attn)
            fused.append(torch.cat((self.revert_projs[b](cls), outs[b][:, 1:]), dim=1))
        return fused


class CrossViTNet(nn.Module):
    """CrossViT: ``forward`` gives logits (fused self-attention), ``forward_explained`` also
    every attention layer's attention."""

    model_kind = "crossvit"

    def __init__(self, config: CrossViTConfig) -> None:
        super().__init__()
        config.validate()
        self.config = config
        C = config.num_classes
        self.patch_embed = nn.ModuleList(PatchEmbed(config, b) for b in range(BRANCHES))
        for b in range(BRANCHES):
            n = config.grid(b)[0] * config.grid(b)[1]
            setattr(self, f"pos_embed_{b}", nn.Parameter(torch.zeros(1, 1 + n, config.dims[b])))
            setattr(self, f"cls_token_{b}", nn.Parameter(torch.zeros(1, 1, config.dims[b])))
        self.blocks = nn.ModuleList(MultiScaleBlock(config, d) for d in config.block_depths)
        self.norm = nn.ModuleList(
            nn.LayerNorm(config.dims[b], eps=config.norm_eps) for b in range(BRANCHES)
        )
        self.head = nn.ModuleList(
            nn.Linear(config.dims[b], C) if C else nn.Identity() for b in range(BRANCHES)
        )

    @property
    def num_prefix_tokens(self) -> int:
        return 1

    def self_blocks(self) -> list[tuple[int, nn.Module]]:
        """(branch, block) of every ViT block, in the order the network runs them."""
        return [
            (b, block) for msb in self.blocks for b in range(BRANCHES) for block in msb.blocks[b]
        ]

    def embed(self, x: Tensor) -> list[Tensor]:
        """(B, C_in, S, S) -> each branch's [CLS, patches] + its position table."""
        S = self.config.image_size[0]
        if tuple(x.shape[-2:]) != (S, S):
            raise ValueError(
                f"a CrossViT's position tables are learnt at {S}×{S}: this input is "
                f"{x.shape[-2]}×{x.shape[-1]}; analyse it at the model's own input size"
            )
        xs = []
        for b, embed in enumerate(self.patch_embed):
            s = self.config.branch_sizes[b]
            image = x if s == S else F.interpolate(x, size=(s, s), mode="bicubic")
            tokens = embed(image)
            cls = getattr(self, f"cls_token_{b}").expand(x.shape[0], -1, -1)
            xs.append(torch.cat((cls, tokens), dim=1) + getattr(self, f"pos_embed_{b}"))
        return xs

    def forward_features(self, x: Tensor, attentions: list[Tensor] | None = None) -> list[Tensor]:
        """-> each branch's final-normed tokens (B, 1 + N_b, D_b)."""
        xs = self.embed(x)
        for msb in self.blocks:
            xs = msb(xs, attentions)
        return [norm(t) for norm, t in zip(self.norm, xs, strict=True)]

    def forward_head(self, xs: list[Tensor]) -> Tensor:
        """The branches' normed tokens -> (B, C): the mean of each branch's head on its CLS (or
        its patches' mean); without a head their features side by side (timm's)."""
        pooled = [t[:, 1:].mean(dim=1) if self.config.global_pool == "avg" else t[:, 0] for t in xs]
        if not self.config.num_classes:
            return torch.cat(pooled, dim=1)
        return torch.stack([h(p) for h, p in zip(self.head, pooled, strict=True)]).mean(dim=0)

    def forward(self, x: Tensor) -> Tensor:
        """(B, C_in, S, S) -> (B, num_classes) logits; the fused attention path."""
        return self.forward_head(self.forward_features(x))

    def forward_explained(self, x: Tensor) -> CrossViTOutput:
        """The explicit attention path, handing back every layer's attention."""
        attentions: list[Tensor] = []
        logits = self.forward_head(self.forward_features(x, attentions))
        return CrossViTOutput(logits, attentions)
