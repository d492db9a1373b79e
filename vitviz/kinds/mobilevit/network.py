"""MobileViTNet: vitviz's MobileViT (DESIGN §3), module names timm's (``mobilevit_*``: a timm
state dict is this network's; transformers' tensors are renamed to them).

stem (3×3 conv stride 2, BatchNorm, SiLU) -> stages: MobileNetV2 inverted residual blocks
(``InvertedResidual``) and a ``MobileViTBlock`` -> ``final_conv`` (1×1, BatchNorm, SiLU) ->
average pool -> ``head.fc``. Every BatchNorm computes with its running statistics (eval form)
whatever the module's mode. A MobileViT block's transformer layers are the ViT's pre-norm
blocks (``vitviz.blocks.layers.Block``: fused qkv with bias, SiLU MLP) over (B·P, N, C): P
pixel offsets of a p × p patch, N patches; each offset's sequence attends over the patches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vitviz.blocks.config import ViTConfig
from vitviz.blocks.layers import Block
from vitviz.kinds.mobilevit.config import MobileViTConfig


class EvalBatchNorm(nn.BatchNorm2d):
    """BatchNorm2d that always normalises with its running statistics (a checkpoint's)."""

    def forward(self, x: Tensor) -> Tensor:
        return F.batch_norm(
            x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps
        )


class ConvNormAct(nn.Module):
    """Conv2d (no bias, padding k // 2) -> BatchNorm -> SiLU (or none): (B, C_in, H, W) ->
    (B, C_out, H', W')."""

    def __init__(
        self, c_in: int, c_out: int, kernel: int, eps: float, stride: int = 1, groups: int = 1,
        act: bool = True,
    ) -> None:  # fmt: skip
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, kernel, stride, kernel // 2, groups=groups, bias=False)
        self.bn = EvalBatchNorm(c_out, eps=eps)
        self.act = nn.SiLU() if act else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        return self.act(self.bn(self.conv(x)))


class InvertedResidual(nn.Module):
    """MobileNetV2's block: 1×1 expand, depthwise 3×3 (stride), 1×1 reduce (no activation);
    the input added when the shape is kept."""

    def __init__(self, c_in: int, c_out: int, hidden: int, stride: int, eps: float) -> None:
        super().__init__()
        self.conv1_1x1 = ConvNormAct(c_in, hidden, 1, eps)
        self.conv2_kxk = ConvNormAct(hidden, hidden, 3, eps, stride=stride, groups=hidden)
        self.conv3_1x1 = ConvNormAct(hidden, c_out, 1, eps, act=False)
        self.residual = stride == 1 and c_in == c_out

    def forward(self, x: Tensor) -> Tensor:
        y = self.conv3_1x1(self.conv2_kxk(self.conv1_1x1(x)))
        return x + y if self.residual else y


def unfold(x: Tensor, p: int) -> Tensor:
    """(B, C, nh·p, nw·p) -> (B·P, N, C): sequence b·P + oy·p + ox holds the pixels at offset
    (oy, ox) of every patch, patch n = ny·nw + nx (the libraries' order)."""
    B, C, H, W = x.shape
    nh, nw = H // p, W // p
    return x.reshape(B, C, nh, p, nw, p).permute(0, 3, 5, 2, 4, 1).reshape(B * p * p, nh * nw, C)


def fold(t: Tensor, p: int, grid: tuple[int, int]) -> Tensor:
    """``unfold``'s inverse: (B·P, N, C) -> (B, C, nh·p, nw·p) for the patch grid (nh, nw)."""
    nh, nw = grid
    C = t.shape[-1]
    B = t.shape[0] // (p * p)
    return t.reshape(B, p, p, nh, nw, C).permute(0, 5, 3, 1, 4, 2).reshape(B, C, nh * p, nw * p)


def patch_grid(size: tuple[int, int], p: int) -> tuple[int, int]:
    """(nh, nw): the patches of a feature map of ``size`` brought up to multiples of p."""
    return math.ceil(size[0] / p), math.ceil(size[1] / p)


def layer_config(config: MobileViTConfig, stage: int) -> ViTConfig:
    """The transformer layers' settings of ``stage``'s MobileViT block."""
    return ViTConfig(
        image_size=config.image_size,
        patch_size=1,
        num_classes=0,
        dim=config.transformer_dims[stage],
        depth=config.depths[stage],
        heads=config.heads[stage],
        mlp_hidden_dim=config.mlp_dims[stage],
        qkv_bias=config.qkv_bias,
        norm_eps=config.norm_eps,
    )


def silu_layer(settings: ViTConfig) -> Block:
    """A pre-norm ViT block whose MLP computes with SiLU (the MobileViTs' activation, which
    the ViT's settings don't offer)."""
    block = Block(settings)
    block.mlp.act = nn.SiLU()
    return block


@dataclass
class BlockPass:
    """One MobileViT block's pass: its feature grid, the patch grid the layers attend over,
    whether the map was resized to it (bilinear, as the libraries do) and each layer's
    attention (B·P, heads, N, N)."""

    grid: tuple[int, int]
    patches: tuple[int, int]
    resized: bool
    attentions: list[Tensor] = field(default_factory=list)


class MobileViTBlock(nn.Module):
    """Local conv (3×3, 1×1 to the transformer width), unfold, transformer layers, LayerNorm,
    fold, 1×1 projection back, 3×3 fusion of [input, projection]."""

    def __init__(self, config: MobileViTConfig, stage: int) -> None:
        super().__init__()
        c, d, eps = config.dims[stage], config.transformer_dims[stage], config.bn_eps
        self.patch = int(config.patch_size)
        self.conv_kxk = ConvNormAct(c, c, 3, eps)
        self.conv_1x1 = nn.Conv2d(c, d, 1, bias=False)
        settings = layer_config(config, stage)
        self.transformer = nn.ModuleList(silu_layer(settings) for _ in range(config.depths[stage]))
        self.norm = nn.LayerNorm(d, eps=config.norm_eps)
        self.conv_proj = ConvNormAct(d, c, 1, eps)
        self.conv_fusion = ConvNormAct(2 * c, c, 3, eps)

    def forward(self, x: Tensor, capture: bool = False) -> tuple[Tensor, BlockPass]:
        p = self.patch
        y = self.conv_1x1(self.conv_kxk(x))
        H, W = y.shape[-2:]
        nh, nw = patch_grid((H, W), p)
        report = BlockPass((int(H), int(W)), (nh, nw), (nh * p, nw * p) != (H, W))
        if report.resized:
            y = F.interpolate(y, size=(nh * p, nw * p), mode="bilinear", align_corners=False)
        t = unfold(y, p)
        for layer in self.transformer:
            t, attn = layer(t, capture=capture)
            if attn is not None:
                report.attentions.append(attn)
        y = fold(self.norm(t), p, (nh, nw))
        if report.resized:
            y = F.interpolate(y, size=(H, W), mode="bilinear", align_corners=False)
        y = self.conv_proj(y)
        return self.conv_fusion(torch.cat((x, y), dim=1)), report


@dataclass
class MobileViTOutput:
    """What one forward pass reports, MobileViT blocks in order."""

    logits: Tensor  # (B, C); without a head the pooled features the head would read
    attentions: list[Tensor]  # per transformer layer (B·P, heads, N, N)
    blocks: list[BlockPass]  # per MobileViT block
    layer_stages: list[int]  # the network stage of each transformer layer


class Head(nn.Module):
    """The classifier on the pooled features (nothing without classes)."""

    def __init__(self, dim: int, classes: int) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, classes) if classes else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(x)


class MobileViTNet(nn.Module):
    """MobileViT: ``forward`` gives logits (fused attention), ``forward_explained`` also each
    transformer layer's attention (B·P, heads, N, N)."""

    model_kind = "mobilevit"

    def __init__(self, config: MobileViTConfig) -> None:
        super().__init__()
        config.validate()
        self.config = config
        eps = config.bn_eps
        self.stem = ConvNormAct(config.in_channels, config.stem_dim, 3, eps, stride=2)
        stages = []
        c_in = config.stem_dim
        for s in range(config.num_stages):
            c = config.dims[s]
            blocks: list[nn.Module] = []
            for j, hidden in enumerate(config.ir_hidden[s]):
                stride = config.strides[s] if j == 0 else 1
                blocks.append(InvertedResidual(c_in if j == 0 else c, c, hidden, stride, eps))
            if config.depths[s]:
                blocks.append(MobileViTBlock(config, s))
            stages.append(nn.ModuleList(blocks))
            c_in = c
        self.stages = nn.ModuleList(stages)
        self.final_conv = ConvNormAct(c_in, config.final_dim, 1, eps)
        self.head = Head(config.final_dim, config.num_classes)

    @property
    def mobilevit_blocks(self) -> list[MobileViTBlock]:
        return [b for stage in self.stages for b in stage if isinstance(b, MobileViTBlock)]

    @property
    def blocks(self) -> list[Block]:
        """Every transformer layer, block by block (the accessor's and the CAM family's)."""
        return [layer for b in self.mobilevit_blocks for layer in b.transformer]  # type: ignore[misc]

    def forward_features(
        self, x: Tensor, capture_attention: bool = False
    ) -> tuple[Tensor, MobileViTOutput]:
        """(B, C_in, H, W) -> the pooled features (B, final_dim) and the report."""
        report = MobileViTOutput(logits=x.new_empty(0), attentions=[], blocks=[], layer_stages=[])
        x = self.stem(x)
        for s, stage in enumerate(self.stages):
            for block in stage:
                if isinstance(block, MobileViTBlock):
                    x, done = block(x, capture=capture_attention)
                    report.blocks.append(done)
                    report.attentions += done.attentions
                    report.layer_stages += [s] * len(block.transformer)
                else:
                    x = block(x)
        return self.final_conv(x).mean(dim=(-2, -1)), report

    def forward_head(self, pooled: Tensor) -> Tensor:
        return self.head(pooled)

    def forward(self, x: Tensor) -> Tensor:
        """(B, C_in, H, W) -> (B, num_classes) logits; the fused attention path."""
        return self.forward_head(self.forward_features(x)[0])

    def forward_explained(self, x: Tensor, capture_attention: bool = True) -> MobileViTOutput:
        """The forward pass that also hands back each transformer layer's attention."""
        pooled, report = self.forward_features(x, capture_attention)
        report.logits = self.forward_head(pooled)
        return report
