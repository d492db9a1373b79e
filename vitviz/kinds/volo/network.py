"""VOLONet: vitviz's Vision Outlooker (VOLO, Yuan et al. 2021), a kind beside the staged ViTs
(DESIGN §3).

Stem (three conv-BatchNorm-ReLU layers, then the patch convolution) -> stage 0's outlookers on
the (B, H, W, C) grid -> ``Downsample`` (2 × 2 strided conv) + the position table -> the
transformer blocks (``vitviz.blocks.layers.Block``: pre-norm, fused qkv, GELU MLP) over the
half grid's tokens row-major -> the CLS joins: class-attention blocks (the CLS alone queries
[CLS, patches] and alone is updated) -> LayerNorm -> head(CLS) + 0.5 · max over the patches of
aux_head (timm's inference). Module names are timm's, so a timm state dict is this network's.

Outlook attention (``OutlookAttention``): v = Linear(x); each window w (a k × k neighbourhood,
padding k // 2, on a stride-s lattice) gets from the s × s average of x at its position a
Linear's k²·k² numbers per head, scaled by head_dim^-½ and softmaxed over the inputs: W_w
(heads, k², k²), rows the window's output cells, columns its input cells. Each window's outputs
W_w·v(window) are folded back onto the grid (overlapping windows summed, cells off the grid
dropped; the padding's inputs are zeros) before the output projection.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vitviz.blocks.config import ViTConfig
from vitviz.blocks.layers import Block, Mlp
from vitviz.kinds.volo.config import VOLOConfig


@dataclass
class VOLOOutput:
    """What one forward pass reports, attention layers in order: the outlookers' weights
    (B, heads, windows, k², k²), the transformer blocks' (B, heads, N, N), the class blocks'
    (B, heads, 1, 1 + N)."""

    logits: Tensor  # (B, C); without a head what the head would read (the normed CLS)
    attentions: list[Tensor] = field(default_factory=list)


class RunningBatchNorm(nn.BatchNorm2d):
    """BatchNorm2d computed with its running statistics always (vitviz runs a VOLO for
    inference only; timm's eval mode)."""

    def forward(self, x: Tensor) -> Tensor:
        return F.batch_norm(
            x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps
        )


class VOLOStem(nn.Module):
    """(B, C_in, H, W) -> (B, D_0, H / p, W / p): conv 7 × 7 / 2, two conv 3 × 3 (each with
    BatchNorm and ReLU), then the patch conv (kernel and stride p / 2)."""

    def __init__(self, config: VOLOConfig) -> None:
        super().__init__()
        c, hidden = config.in_channels, config.stem_hidden_dim
        layers: list[nn.Module] = []
        for i, (k, s) in enumerate(((7, 2), (3, 1), (3, 1))):
            layers += [
                nn.Conv2d(c if i == 0 else hidden, hidden, k, stride=s, padding=k // 2, bias=False),
                RunningBatchNorm(hidden),
                nn.ReLU(),
            ]
        self.conv = nn.Sequential(*layers)
        step = config.patch_size // 2
        self.proj = nn.Conv2d(hidden, config.dims[0], step, stride=step)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(self.conv(x))


def vit_settings(dim: int, heads: int, hidden: int, config: VOLOConfig) -> ViTConfig:
    """The ViT block settings of a block of ``dim`` channels."""
    return ViTConfig(
        image_size=config.image_size,
        patch_size=config.patch_size,
        num_classes=0,
        dim=dim,
        depth=1,
        heads=heads,
        mlp_hidden_dim=hidden,
        qkv_bias=config.qkv_bias,
        norm_eps=config.norm_eps,
    )


class OutlookAttention(nn.Module):
    """(B, H, W, C) -> (B, H, W, C) and the weights (B, heads, windows, k², k²); the
    projection reads the folded heads (B, H·W, C), channels head by head."""

    def __init__(self, dim: int, heads: int, config: VOLOConfig) -> None:
        super().__init__()
        self.heads, self.k = heads, config.kernel_size
        self.stride, self.padding = config.outlook_stride, config.padding
        self.scale = (dim // heads) ** -0.5
        self.v = nn.Linear(dim, dim, bias=config.qkv_bias)
        self.attn = nn.Linear(dim, self.k**4 * heads)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        B, H, W, C = x.shape
        k2, nh, d = self.k * self.k, self.heads, C // self.heads
        h, w = math.ceil(H / self.stride), math.ceil(W / self.stride)
        v = self.v(x).permute(0, 3, 1, 2)  # (B, C, H, W)
        v = F.unfold(v, self.k, padding=self.padding, stride=self.stride)  # (B, C·k², L)
        v = v.reshape(B, nh, d, k2, h * w).permute(0, 1, 4, 3, 2)  # (B, nh, L, k², d)
        pooled = F.avg_pool2d(x.permute(0, 3, 1, 2), self.stride, self.stride, ceil_mode=True)
        logits = self.attn(pooled.permute(0, 2, 3, 1)).reshape(B, h * w, nh, k2, k2)
        weights = (logits.permute(0, 2, 1, 3, 4) * self.scale).softmax(dim=-1)
        out = (weights @ v).permute(0, 1, 4, 3, 2).reshape(B, C * k2, h * w)
        out = F.fold(out, (H, W), self.k, padding=self.padding, stride=self.stride)
        out = self.proj(out.flatten(2).transpose(1, 2))  # (B, H·W, C)
        return out.reshape(B, H, W, C), weights


class Outlooker(nn.Module):
    """x + outlook(norm1(x)); x + mlp(norm2(x)) on (B, H, W, C)."""

    def __init__(self, dim: int, heads: int, hidden: int, config: VOLOConfig) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=config.norm_eps)
        self.attn = OutlookAttention(dim, heads, config)
        self.norm2 = nn.LayerNorm(dim, eps=config.norm_eps)
        self.mlp = Mlp(vit_settings(dim, heads, hidden, config))

    def forward(self, x: Tensor, capture: bool = False) -> tuple[Tensor, Tensor | None]:
        y, weights = self.attn(self.norm1(x))
        x = x + y
        return x + self.mlp(self.norm2(x)), weights if capture else None


class Downsample(nn.Module):
    """(B, H, W, C) -> (B, H / 2, W / 2, C'): a 2 × 2 conv of stride 2."""

    def __init__(self, dim_in: int, dim_out: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(dim_in, dim_out, 2, stride=2)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)


class ClassAttention(nn.Module):
    """(B, 1 + N, C) -> the CLS's update (B, 1, C) and its attention (B, heads, 1, 1 + N)."""

    def __init__(self, dim: int, heads: int, qkv_bias: bool) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.kv = nn.Linear(dim, 2 * dim, bias=qkv_bias)
        self.q = nn.Linear(dim, dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        B, N, C = x.shape
        kv = self.kv(x).reshape(B, N, 2, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        k, v = kv.unbind(0)  # (B, nh, N, d)
        q = self.q(x[:, :1]).reshape(B, self.heads, 1, self.head_dim) * self.head_dim**-0.5
        attn = (q @ k.transpose(-2, -1)).softmax(dim=-1)  # (B, nh, 1, N)
        out = (attn @ v).transpose(1, 2).reshape(B, 1, C)
        return self.proj(out), attn


class ClassBlock(nn.Module):
    """The CLS: cls + attn(norm1([CLS, patches])); cls + mlp(norm2(cls)); the patches pass."""

    def __init__(self, dim: int, heads: int, hidden: int, config: VOLOConfig) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=config.norm_eps)
        self.attn = ClassAttention(dim, heads, config.qkv_bias)
        self.norm2 = nn.LayerNorm(dim, eps=config.norm_eps)
        self.mlp = Mlp(vit_settings(dim, heads, hidden, config))

    def forward(self, x: Tensor, capture: bool = False) -> tuple[Tensor, Tensor | None]:
        y, attn = self.attn(self.norm1(x))
        cls = x[:, :1] + y
        cls = cls + self.mlp(self.norm2(cls))
        return torch.cat([cls, x[:, 1:]], dim=1), attn if capture else None


class VOLONet(nn.Module):
    """VOLO: ``forward`` gives logits, ``forward_explained`` also every attention layer's
    weights (see ``VOLOOutput``)."""

    model_kind = "volo"

    def __init__(self, config: VOLOConfig) -> None:
        super().__init__()
        config.validate()
        self.config = config
        cfg = config
        self.patch_embed = VOLOStem(cfg)
        h, w = cfg.stage_grids()[1]
        self.pos_embed = nn.Parameter(torch.zeros(1, h, w, cfg.dims[-1]))
        stages: list[nn.Module] = [
            nn.ModuleList(
                Outlooker(cfg.dims[0], cfg.heads[0], cfg.mlp_hidden_dims[0], cfg)
                for _ in range(cfg.depths[0])
            ),
            Downsample(cfg.dims[0], cfg.dims[1]),
        ]
        for s in range(1, cfg.num_stages):
            settings = vit_settings(cfg.dims[s], cfg.heads[s], cfg.mlp_hidden_dims[s], cfg)
            stages.append(nn.ModuleList(Block(settings) for _ in range(cfg.depths[s])))
        self.network = nn.ModuleList(stages)
        D = cfg.dims[-1]
        self.post_network = nn.ModuleList(
            ClassBlock(D, cfg.heads[-1], cfg.mlp_hidden_dims[-1], cfg)
            for _ in range(cfg.class_blocks)
        )
        self.cls_token = nn.Parameter(torch.zeros(1, 1, D))
        C = cfg.num_classes
        self.aux_head = nn.Linear(D, C) if C and cfg.aux_head else None
        self.norm = nn.LayerNorm(D, eps=cfg.norm_eps)
        self.head = nn.Linear(D, C) if C else nn.Identity()

    @property
    def outlookers(self) -> list[Outlooker]:
        return list(self.network[0])  # type: ignore[arg-type]

    @property
    def transformer_blocks(self) -> list[Block]:
        return [b for stage in self.network[2:] for b in stage]  # type: ignore[union-attr]

    @property
    def blocks(self) -> list[nn.Module]:
        """The blocks on a grid: the outlookers, then the transformer blocks."""
        return [*self.outlookers, *self.transformer_blocks]

    @property
    def attention_layers(self) -> list[nn.Module]:
        """Every attention layer's block in order: the grid blocks, then the class blocks."""
        return [*self.blocks, *self.post_network]

    def forward_features(self, x: Tensor, capture: bool = False) -> tuple[Tensor, VOLOOutput]:
        """(B, C_in, H, W) -> the final-normed [CLS, patches] (B, 1 + N, D) and the report."""
        report = VOLOOutput(logits=x.new_empty(0))
        x = self.patch_embed(x)
        expected = tuple(self.config.stage_grids()[0])
        if tuple(x.shape[-2:]) != expected:
            H, W = self.config.image_size
            raise ValueError(
                f"a VOLO's position table is learnt on a {expected[0] // 2}×{expected[1] // 2} "
                f"grid: this input gives {x.shape[-2] // 2}×{x.shape[-1] // 2}; analyse it at the "
                f"model's own input size {H}×{W}"
            )
        x = x.permute(0, 2, 3, 1)  # (B, H, W, C)
        for block in self.outlookers:
            x, attn = block(x, capture)
            if attn is not None:
                report.attentions.append(attn)
        x = self.network[1](x) + self.pos_embed
        t = x.flatten(1, 2)  # (B, N, C) row-major
        for block in self.transformer_blocks:
            t, attn = block(t, capture=capture)
            if attn is not None:
                report.attentions.append(attn)
        t = torch.cat([self.cls_token.expand(t.shape[0], -1, -1), t], dim=1)
        for block in self.post_network:
            t, attn = block(t, capture)
            if attn is not None:
                report.attentions.append(attn)
        return self.norm(t), report

    def forward_head(self, tokens: Tensor) -> Tensor:
        """(B, 1 + N, D) normed tokens -> (B, C): head(CLS) + 0.5 · max_t aux_head(t) (timm's
        inference); without classes the CLS (timm's pre-logits)."""
        out = self.head(tokens[:, 0])
        if self.aux_head is not None:
            out = out + 0.5 * self.aux_head(tokens[:, 1:]).max(dim=1)[0]
        return out

    def forward(self, x: Tensor) -> Tensor:
        """(B, C_in, H, W) -> (B, num_classes) logits."""
        return self.forward_head(self.forward_features(x)[0])

    def forward_explained(self, x: Tensor, capture_attention: bool = True) -> VOLOOutput:
        """The forward pass that also hands back every attention layer's weights."""
        tokens, report = self.forward_features(x, capture_attention)
        report.logits = self.forward_head(tokens)
        return report
