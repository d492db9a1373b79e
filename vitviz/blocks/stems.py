"""Hybrid ViT stems: a convolutional backbone, then a Conv2d projection to the tokens.

``HybridEmbed(config)``: (B, C, H, W) image -> (B, gh·gw, dim) tokens and the grid (gh, gw),
gh = H / (backbone reduction · proj_patch). The backbones (``StemConfig``) are written from the
facts of timm's ResNetV2 (non-pre-activation, weight-standardised convs + GroupNorm) and ResNet-D
(deep stem, avg-down shortcut, BatchNorm); their module names are timm's, so a timm hybrid's
``patch_embed.backbone.*`` tensors land where they are read. The stem is not part of the
attention or relevance chain: every method starts at the tokens it makes.
"""

from __future__ import annotations

import math

import torch.nn.functional as F
from torch import Tensor, nn

from vitviz.blocks.config import ViTConfig
from vitviz.blocks.stem_config import StemConfig


def same_padding(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """TensorFlow "SAME" padding of one side length: (before, after), the extra pixel after."""
    total = max((math.ceil(size / stride) - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def pad_same(x: Tensor, kernel: int, stride: int, value: float = 0.0) -> Tensor:
    """(B, C, H, W) padded so a kernel/stride window covers ceil(H/stride) outputs."""
    top, bottom = same_padding(x.shape[-2], kernel, stride)
    left, right = same_padding(x.shape[-1], kernel, stride)
    if top == bottom == left == right == 0:
        return x
    return F.pad(x, (left, right, top, bottom), value=value)


class StdConv2d(nn.Conv2d):
    """Conv2d with weight standardisation: each output filter's weights less their mean, over
    sqrt(their biased variance + eps), before the convolution. ``same``: TF "SAME" padding of the
    input (else PyTorch's symmetric ((stride − 1) + kernel − 1) // 2, which SAME is at stride 1
    with an odd kernel: then the conv pads, as timm's does). No bias."""

    def __init__(
        self,
        cin: int,
        cout: int,
        kernel: int,
        stride: int = 1,
        same: bool = True,
        eps: float = 1e-8,
    ) -> None:
        symmetric = ((stride - 1) + (kernel - 1)) // 2
        static = not same or (stride == 1 and kernel % 2 == 1)  # SAME is symmetric here
        super().__init__(cin, cout, kernel, stride, padding=symmetric if static else 0, bias=False)
        self.same, self.eps = not static, eps  # same: padded per input size in forward

    def forward(self, x: Tensor) -> Tensor:
        w = self.weight  # standardised by batch_norm over (1, cout, fan-in): timm's numerics
        w = F.batch_norm(w.reshape(1, w.shape[0], -1), None, None, training=True, eps=self.eps)
        w = w.reshape_as(self.weight)
        if self.same:
            x = pad_same(x, self.kernel_size[0], self.stride[0])
        return F.conv2d(x, w, None, self.stride, self.padding)


class GroupNormAct(nn.GroupNorm):
    """GroupNorm over (B, C, H, W), then ReLU when ``act``."""

    def __init__(self, groups: int, channels: int, eps: float, act: bool = True) -> None:
        super().__init__(groups, channels, eps=eps)
        self.act = act

    def forward(self, x: Tensor) -> Tensor:
        x = F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)
        return F.relu(x) if self.act else x


class MaxPool3x3(nn.Module):
    """3×3 stride-2 max pool: TF "SAME" (padded with −inf) or PyTorch's padding 1."""

    def __init__(self, same: bool) -> None:
        super().__init__()
        self.same = same

    def forward(self, x: Tensor) -> Tensor:
        if self.same:
            return F.max_pool2d(pad_same(x, 3, 2, value=-math.inf), 3, 2)
        return F.max_pool2d(x, 3, 2, padding=1)


# -- ResNetV2 (timm's ``resnetv2`` with preact=False, as the hybrid ViTs build it) ----------------
class ResNetV2Stem(nn.Module):
    """conv 7×7/2 -> GroupNorm + ReLU -> max pool 3×3/2: (B, C, H, W) -> (B, width, H/4, W/4)."""

    def __init__(self, cfg: StemConfig, in_channels: int) -> None:
        super().__init__()
        same = cfg.same_padding
        self.conv = StdConv2d(in_channels, cfg.stem_width, 7, 2, same, cfg.conv_eps)
        self.norm = GroupNormAct(cfg.groups, cfg.stem_width, cfg.norm_eps)
        self.pool = MaxPool3x3(same)

    def forward(self, x: Tensor) -> Tensor:
        return self.pool(self.norm(self.conv(x)))


class DownsampleConv(nn.Module):
    """The shortcut of a stage's first block: 1×1 conv (with the stride) -> GroupNorm."""

    def __init__(self, cfg: StemConfig, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv = StdConv2d(cin, cout, 1, stride, cfg.same_padding, cfg.conv_eps)
        self.norm = GroupNormAct(cfg.groups, cout, cfg.norm_eps, act=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(self.conv(x))


class BottleneckV2(nn.Module):
    """relu(shortcut(x) + norm3(conv3(norm2(conv2(norm1(conv1(x))))))): 1×1, 3×3 (stride), 1×1
    weight-standardised convs of width cout / 4, GroupNorm (+ ReLU but after norm3)."""

    def __init__(self, cfg: StemConfig, cin: int, cout: int, stride: int, first: bool) -> None:
        super().__init__()
        mid, same, eps, g = cout // 4, cfg.same_padding, cfg.conv_eps, cfg.groups
        self.downsample = DownsampleConv(cfg, cin, cout, stride) if first else None
        self.conv1 = StdConv2d(cin, mid, 1, 1, same, eps)
        self.norm1 = GroupNormAct(g, mid, cfg.norm_eps)
        self.conv2 = StdConv2d(mid, mid, 3, stride, same, eps)
        self.norm2 = GroupNormAct(g, mid, cfg.norm_eps)
        self.conv3 = StdConv2d(mid, cout, 1, 1, same, eps)
        self.norm3 = GroupNormAct(g, cout, cfg.norm_eps, act=False)

    def forward(self, x: Tensor) -> Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)
        y = self.norm2(self.conv2(self.norm1(self.conv1(x))))
        return F.relu(self.norm3(self.conv3(y)) + shortcut)


class StageV2(nn.Module):
    """``blocks``: one stage's bottlenecks, the first with the stride and the shortcut conv."""

    def __init__(self, cfg: StemConfig, cin: int, cout: int, depth: int, stride: int) -> None:
        super().__init__()
        self.blocks = nn.Sequential(
            *(
                BottleneckV2(cfg, cin if i == 0 else cout, cout, stride if i == 0 else 1, i == 0)
                for i in range(depth)
            )
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.blocks(x)


class ResNetV2(nn.Module):
    """``stem`` then ``stages``: (B, C, H, W) -> (B, channels[-1], H/r, W/r), r = 4·2^(S−1)."""

    def __init__(self, cfg: StemConfig, in_channels: int) -> None:
        super().__init__()
        self.stem = ResNetV2Stem(cfg, in_channels)
        cin, stages = cfg.stem_width, []
        for i, (depth, cout) in enumerate(zip(cfg.layers, cfg.channels, strict=True)):
            stages.append(StageV2(cfg, cin, cout, depth, 1 if i == 0 else 2))
            cin = cout
        self.stages = nn.Sequential(*stages)

    def forward(self, x: Tensor) -> Tensor:
        return self.stages(self.stem(x))


# -- ResNet-D (timm's ``resnet26d`` / ``resnet50d`` features) -------------------------------------
def _bn(channels: int, eps: float) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(channels, eps=eps)


class BottleneckD(nn.Module):
    """relu(shortcut(x) + bn3(conv3(relu(bn2(conv2(relu(bn1(conv1(x))))))))), the stride on the
    3×3 conv; the first block's shortcut: avg pool 2×2 (ceil, padding not counted) when strided,
    then 1×1 conv and BatchNorm (``downsample.1``, ``downsample.2``)."""

    def __init__(self, cfg: StemConfig, cin: int, cout: int, stride: int, first: bool) -> None:
        super().__init__()
        mid, eps = cout // 4, cfg.norm_eps
        self.conv1 = nn.Conv2d(cin, mid, 1, bias=False)
        self.bn1 = _bn(mid, eps)
        self.conv2 = nn.Conv2d(mid, mid, 3, stride=stride, padding=1, bias=False)
        self.bn2 = _bn(mid, eps)
        self.conv3 = nn.Conv2d(mid, cout, 1, bias=False)
        self.bn3 = _bn(cout, eps)
        self.downsample: nn.Sequential | None = None
        if first:
            pool: nn.Module = (
                nn.AvgPool2d(2, stride, ceil_mode=True, count_include_pad=False)
                if stride != 1
                else nn.Identity()
            )
            conv = nn.Conv2d(cin, cout, 1, bias=False)
            self.downsample = nn.Sequential(pool, conv, _bn(cout, eps))

    def forward(self, x: Tensor) -> Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        return F.relu(self.bn3(self.conv3(y)) + shortcut)


class ResNetD(nn.Module):
    """Deep stem (``conv1.0/1/3/4/6``: 3×3/2, 3×3, 3×3 convs, BatchNorm + ReLU between), ``bn1``
    + ReLU, max pool 3×3/2 padding 1, then ``layer1..layerS``: (B, C, H, W) ->
    (B, channels[-1], H/r, W/r)."""

    def __init__(self, cfg: StemConfig, in_channels: int) -> None:
        super().__init__()
        half, w, eps = cfg.stem_width // 2, cfg.stem_width, cfg.norm_eps
        self.conv1 = nn.Sequential(
            nn.Conv2d(in_channels, half, 3, stride=2, padding=1, bias=False),
            _bn(half, eps),
            nn.ReLU(),
            nn.Conv2d(half, half, 3, padding=1, bias=False),
            _bn(half, eps),
            nn.ReLU(),
            nn.Conv2d(half, w, 3, padding=1, bias=False),
        )
        self.bn1 = _bn(w, eps)
        cin = w
        self.num_stages = len(cfg.layers)
        for i, (depth, cout) in enumerate(zip(cfg.layers, cfg.channels, strict=True)):
            stride = 1 if i == 0 else 2
            blocks = [
                BottleneckD(cfg, cin if j == 0 else cout, cout, stride if j == 0 else 1, j == 0)
                for j in range(depth)
            ]
            self.add_module(f"layer{i + 1}", nn.Sequential(*blocks))
            cin = cout

    def forward(self, x: Tensor) -> Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, padding=1)
        for i in range(self.num_stages):
            x = getattr(self, f"layer{i + 1}")(x)
        return x


# -- MobileCLIP's convolutional stem (timm's ``ConvStem``) ---------------------------------------
class ConvBN(nn.Module):
    """``conv`` (kernel = stride, no padding) then ``bn`` (BatchNorm) and GELU; the last conv of
    the stem alone, with a bias."""

    def __init__(self, cin: int, cout: int, kernel: int, eps: float, last: bool) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel, stride=kernel, bias=last)
        self.bn: nn.Module = nn.Identity() if last else _bn(cout, eps)
        self.last = last

    def forward(self, x: Tensor) -> Tensor:
        x = self.bn(self.conv(x))
        return x if self.last else F.gelu(x)


def conv_stem(cfg: StemConfig, in_channels: int) -> nn.Sequential:
    """(B, C, H, W) -> (B, channels[-1], H/r, W/r), r = the product of the kernels."""
    convs, cin = [], in_channels
    for i, (cout, k) in enumerate(zip(cfg.channels, cfg.kernels, strict=True)):
        convs.append(ConvBN(cin, cout, k, cfg.norm_eps, i == len(cfg.channels) - 1))
        cin = cout
    return nn.Sequential(*convs)


def make_backbone(cfg: StemConfig, in_channels: int) -> nn.Module:
    """The backbone of ``cfg``; a ResNetV2 without stages is its stem alone (timm's layout)."""
    if cfg.kind == "convstem":
        return conv_stem(cfg, in_channels)
    if cfg.kind == "resnet_d":
        return ResNetD(cfg, in_channels)
    if not cfg.layers:
        return ResNetV2Stem(cfg, in_channels)
    return ResNetV2(cfg, in_channels)


class HybridEmbed(nn.Module):
    """Backbone features -> Conv2d (kernel = stride = proj_patch) -> tokens:
    (B, C, H, W) -> ((B, gh·gw, dim), (gh, gw)), row-major like the patch embedding."""

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        stem = config.stem
        assert stem is not None
        self.patch_size = config.patch_size  # pixels per token
        self.backbone = make_backbone(stem, config.in_channels)
        p = stem.proj_patch
        self.proj: nn.Module = (
            nn.Conv2d(stem.feature_dim, config.dim, kernel_size=p, stride=p) if p else nn.Identity()
        )

    def forward(self, x: Tensor) -> tuple[Tensor, tuple[int, int]]:
        H, W = x.shape[-2:]
        p = self.patch_size
        if H % p or W % p:
            raise ValueError(f"input {H}×{W} is not divisible by the stem's stride {p}")
        x = self.proj(self.backbone(x))  # (B, dim, gh, gw)
        grid = (int(x.shape[-2]), int(x.shape[-1]))
        return x.flatten(2).transpose(1, 2), grid
