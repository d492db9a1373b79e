"""MobileViTConfig: every number and switch needed to rebuild vitviz's MobileViT (Mehta and
Rastegari 2021; timm's ``mobilevit_xxs``, ``mobilevit_xs``, ``mobilevit_s``, transformers'
``MobileViTForImageClassification`` / ``MobileViTModel``).

A stem (3×3 conv, stride 2, BatchNorm, SiLU), then stages: stage s has ``ir_depths[s]``
MobileNetV2 inverted residual blocks (the first of stride ``strides[s]``; 1×1 expand to its
``ir_hidden`` width, depthwise 3×3, 1×1 reduce without activation; a residual when the shape
is kept) and, where ``depths[s]`` > 0, one MobileViT block: a 3×3 conv and a 1×1 conv to
``transformer_dims[s]``, the map unfolded into ``patch_size``² pixel offsets × patches,
``depths[s]`` pre-norm transformer layers (``heads[s]`` heads, SiLU MLP of ``mlp_dims[s]``)
in which each offset's sequence attends over the patches, a LayerNorm, the fold, a 1×1
projection back and a 3×3 fusion conv of [its input, that]. A final 1×1 conv to
``final_dim``, the average pool and the head. Every BatchNorm computes with its running
statistics. Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from vitviz.blocks.config import _pair
from vitviz.kinds.staged_config import StagedConfig


@dataclass
class MobileViTConfig(StagedConfig):
    """Architecture of a MobileViT, per network stage (a stage without a MobileViT block has
    depth 0, transformer width 0 and 0 heads)."""

    NOUN: ClassVar[str] = "MobileViT"

    image_size: tuple[int, int] = (256, 256)
    in_channels: int = 3
    stem_dim: int = 16
    dims: tuple[int, ...] = (16, 24, 48, 64, 80)  # each stage's output channels
    strides: tuple[int, ...] = (1, 2, 2, 2, 2)  # each stage's first block's stride
    ir_depths: tuple[int, ...] = (1, 3, 1, 1, 1)  # inverted residual blocks per stage
    ir_hidden: tuple[tuple[int, ...], ...] = ((32,), (32, 48, 48), (48,), (96,), (128,))
    depths: tuple[int, ...] = (0, 0, 2, 4, 3)  # transformer layers of each stage's MobileViT
    transformer_dims: tuple[int, ...] = (0, 0, 64, 80, 96)
    heads: tuple[int, ...] = (0, 0, 4, 4, 4)
    mlp_dims: tuple[int, ...] = (0, 0, 128, 160, 192)
    patch_size: int = 2
    final_dim: int = 320
    num_classes: int = 1000
    norm_eps: float = 1e-5  # the transformer layers' and the block's LayerNorm
    bn_eps: float = 1e-5
    qkv_bias: bool = True

    def __post_init__(self) -> None:
        self.image_size = _pair(self.image_size)
        for name in ("dims", "strides", "ir_depths", "depths", "transformer_dims", "heads",
                     "mlp_dims"):  # fmt: skip
            setattr(self, name, tuple(int(v) for v in getattr(self, name)))
        self.ir_hidden = tuple(tuple(int(v) for v in stage) for stage in self.ir_hidden)

    def to_dict(self) -> dict[str, object]:
        out = super().to_dict()
        out["ir_hidden"] = [list(stage) for stage in self.ir_hidden]
        return out

    @property
    def attention_stages(self) -> list[int]:
        """The network stages with a MobileViT block, in order."""
        return [s for s, d in enumerate(self.depths) if d > 0]

    @property
    def layer_heads(self) -> list[int]:
        """Heads of every transformer layer, in order."""
        return [self.heads[s] for s in self.attention_stages for _ in range(self.depths[s])]

    def stage_stride(self, stage: int) -> int:
        """Input pixels per side of a feature pixel after network stage ``stage``."""
        stride = 2
        for s in range(stage + 1):
            stride *= self.strides[s]
        return stride

    def feature_grid(self, stage: int, size: tuple[int, int] | None = None) -> tuple[int, int]:
        """(h, w) of network stage ``stage``'s feature map for an input of ``size`` (default
        ``image_size``): every stride-2 3×3 conv (padding 1) gives ⌊(n - 1) / 2⌋ + 1."""
        h, w = size or self.image_size
        for s in range(-1, stage + 1):
            st = 2 if s < 0 else self.strides[s]
            h, w = (h - 1) // st + 1, (w - 1) // st + 1
        return h, w

    def validate(self) -> None:
        S = self.num_stages
        if S == 0:
            raise ValueError("a MobileViT needs at least one stage")
        lengths = {
            len(getattr(self, n))
            for n in (
                "dims",
                "strides",
                "ir_depths",
                "ir_hidden",
                "transformer_dims",
                "heads",
                "mlp_dims",
            )
        }
        if lengths != {S}:
            raise ValueError("every per-stage setting of a MobileViT needs one value per stage")
        if not any(self.depths):
            raise ValueError("a MobileViT needs at least one MobileViT block (transformer layers)")
        for s in range(S):
            if len(self.ir_hidden[s]) != self.ir_depths[s]:
                raise ValueError(f"stage {s}: one hidden width per inverted residual block")
            if self.strides[s] not in (1, 2):
                raise ValueError(f"stage {s}: stride {self.strides[s]} is not 1 or 2")
            if self.strides[s] != 1 and not self.ir_depths[s]:
                raise ValueError(f"stage {s}: its stride needs an inverted residual block")
            if self.depths[s]:
                if min(self.transformer_dims[s], self.heads[s], self.mlp_dims[s]) < 1:
                    raise ValueError(f"stage {s}: transformer width, heads, MLP must be positive")
                if self.transformer_dims[s] % self.heads[s]:
                    raise ValueError(
                        f"stage {s}: width {self.transformer_dims[s]} is not divisible by "
                        f"{self.heads[s]} heads"
                    )
            elif s and self.ir_depths[s] == 0:
                raise ValueError(f"stage {s} has neither inverted residual nor MobileViT blocks")
        if min(self.in_channels, self.stem_dim, self.patch_size, self.final_dim, *self.dims) < 1:
            raise ValueError("channels, widths and the patch size must be positive")
        if self.num_classes < 0:
            raise ValueError("classes must not be negative")
