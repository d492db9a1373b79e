"""StemConfig: the convolutional backbone before the tokens of a hybrid ViT (timm's
``vision_transformer_hybrid``), as plain numbers; the modules are in ``vitviz.blocks.stems``.

Two backbones:

- ``"resnetv2"``: timm's ResNetV2 as the hybrids build it (``preact=False``): a 7×7 stride-2
  weight-standardised conv, GroupNorm + ReLU, a 3×3 stride-2 max pool, then bottleneck stages
  (``layers`` blocks each; strides 1, 2, 2, 2); ``layers=()`` is the stem alone (stride 4).
  ``same_padding``: TensorFlow "SAME" padding (timm's ``padding_same=True``, the default), else
  PyTorch's symmetric padding. ``conv_eps``: the weight standardisation's eps (1e-8).
- ``"resnet_d"``: timm's ResNet-D (``resnet26d``, ``resnet50d``): a deep stem of three 3×3
  convs (the first stride 2), BatchNorm + ReLU, a 3×3 stride-2 max pool, bottleneck stages whose
  shortcut average-pools before its 1×1 conv (avg-down); BatchNorm in eval mode.

- ``"convstem"``: MobileCLIP's stem (timm's ``vit_base_mci_224``): unpadded convs of kernel =
  stride ``kernels[i]`` and ``channels[i]`` outputs, BatchNorm + GELU after each but the last,
  which has a bias; ``layers=()``.

The tokens are the last stage's feature map through a Conv2d of kernel = stride = ``proj_patch``
(``proj_patch=0``: no projection, the features are the tokens).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

STEM_KINDS = ("resnetv2", "resnet_d", "convstem")
STEM_WORDS = {
    "resnetv2": "ResNetV2",
    "resnet_d": "ResNet-D",
    "convstem": "MobileCLIP's convolutional",
}


@dataclass
class StemConfig:
    """A hybrid ViT's backbone (see the module's docstring); channel counts are the weights'."""

    kind: str = "resnetv2"
    layers: tuple[int, ...] = (3, 4, 9)  # bottleneck blocks per stage; () = the stem alone
    stem_width: int = 64  # channels out of the stem (ResNet-D: its third conv)
    channels: tuple[int, ...] = (256, 512, 1024)  # each stage's output channels
    proj_patch: int = 1  # kernel = stride of the projection to the tokens
    same_padding: bool = True  # resnetv2: TF "SAME" padding (timm's StdConv2dSame, pool)
    conv_eps: float = 1e-8  # resnetv2: weight-standardisation eps
    norm_eps: float = 1e-5  # GroupNorm (resnetv2) or BatchNorm (resnet_d) eps
    groups: int = 32  # resnetv2: GroupNorm groups
    kernels: tuple[int, ...] = ()  # convstem: each conv's kernel = stride

    def __post_init__(self) -> None:
        self.layers = tuple(int(n) for n in self.layers)
        self.channels = tuple(int(c) for c in self.channels)
        self.kernels = tuple(int(k) for k in self.kernels)

    @property
    def reduction(self) -> int:
        """How many pixels one feature-map cell spans: stem 4, then ×2 per stage after the first."""
        if self.kind == "convstem":
            return math.prod(self.kernels)
        return 4 * 2 ** max(len(self.layers) - 1, 0)

    @property
    def stride(self) -> int:
        """Pixels per token: the backbone's reduction times the projection's patch."""
        return self.reduction * max(self.proj_patch, 1)

    @property
    def feature_dim(self) -> int:
        return self.channels[-1] if self.layers or self.kind == "convstem" else self.stem_width

    def problems(self) -> list[str]:
        """Plain messages for settings that can't build a backbone."""
        out = []
        if self.kind not in STEM_KINDS:
            out.append(f"stem kind must be one of {STEM_KINDS} (got {self.kind!r})")
        convstem = self.kind == "convstem"
        if convstem and (not self.kernels or len(self.kernels) != len(self.channels)):
            out.append("a convolutional stem needs one kernel per conv")
        if not convstem and len(self.channels) != len(self.layers):
            out.append("stem channels and layers differ in length")
        if any(n < 1 for n in self.layers) or len(self.layers) > 4:
            out.append("stem layers must be up to 4 stages of at least 1 block")
        if self.kind == "resnet_d" and not self.layers:
            out.append("a ResNet-D stem needs at least one stage")
        if self.proj_patch < 0 or self.stem_width < 1 or any(c < 4 for c in self.channels):
            out.append("stem widths and proj_patch must be positive")
        return out

    def words(self) -> str:
        """'ResNetV2 (R50) stem, stride 16, then a 1×1 projection' style (R-n: 3 convs a block,
        the stem's and the head's one each)."""
        name = STEM_WORDS.get(self.kind, self.kind)
        body = f"{name} (R{3 * sum(self.layers) + 2}) stem" if self.layers else f"{name} stem"
        p = self.proj_patch
        then = f"then a {p}×{p} projection" if p else "no projection"
        return f"{body}, stride {self.reduction}, {then}"
