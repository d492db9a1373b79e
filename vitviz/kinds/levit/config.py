"""LeViTConfig: every number and switch needed to rebuild vitviz's LeViT (Graham et al. 2021,
timm's ``levit_*`` and ``levit_conv_*``).

A LeViT's stem is 4 (``stem_stride`` 16) or 3 (8) stride-2 3×3 convs, each with a BatchNorm,
the activation between them; its output grid is the input's // ``stem_stride``. Each stage's
blocks are attention (Linear + BatchNorm for q, k, v; a learned bias per head and per offset
(|dy|, |dx|) on the stage's grid; the activation, then Linear + BatchNorm) and an MLP (Linear +
BatchNorm, activation, Linear + BatchNorm), each added to its input. Stage s > 0 starts with a
subsample block: attention whose queries are the previous stage's tokens at every other row and
column and whose keys and values are all of them (``dims[s-1] // key_dim`` heads, values 4 ×
``key_dim`` wide; no residual), then an MLP (2 × the width) added to its output. The head reads
the mean of the last stage's tokens through a BatchNorm and a Linear (distilled: the mean of
two such heads). ``conv`` says the file's layout (timm's ``levit_conv_*``: 1×1 convs and 2-d
BatchNorms), which computes the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from vitviz.blocks.config import _pair
from vitviz.kinds.staged_config import StagedConfig

ACTIVATIONS = ("hard_swish", "silu")
DOWN_VALUE_RATIO = 4  # timm's subsample attention: values 4 × key_dim per head
DOWN_MLP_RATIO = 2  # and its MLP: 2 × the new width


@dataclass
class LeViTConfig(StagedConfig):
    """Architecture of a LeViT: stage s has ``depths[s]`` blocks of width ``dims[s]`` with
    ``heads[s]`` heads of keys ``key_dim`` and values ``value_dims[s]`` wide, and an MLP of
    ``mlp_hidden_dims[s]`` channels."""

    NOUN: ClassVar[str] = "LeViT"

    image_size: tuple[int, int] = (224, 224)
    in_channels: int = 3
    num_classes: int = 1000
    stem_stride: int = 16  # 16: four stem convs, 8: three
    dims: tuple[int, ...] = (128, 256, 384)
    depths: tuple[int, ...] = (2, 3, 4)
    heads: tuple[int, ...] = (4, 6, 8)
    key_dim: int = 16
    value_dims: tuple[int, ...] = (32, 32, 32)  # per head (timm: attn_ratio × key_dim)
    mlp_hidden_dims: tuple[int, ...] = (256, 512, 768)  # timm: mlp_ratio × width
    activation: str = "hard_swish"
    distilled: bool = True  # a second head (head_dist); the logits are the two heads' mean
    conv: bool = False  # the file's layout: timm's levit_conv_* (same computation)
    bn_eps: float = 1e-5

    def __post_init__(self) -> None:
        self.image_size = _pair(self.image_size)
        for name in ("dims", "depths", "heads", "value_dims", "mlp_hidden_dims"):
            setattr(self, name, tuple(int(v) for v in getattr(self, name)))

    @property
    def patch_size(self) -> int:
        """Input pixels per side of a first-stage token (the stem's stride)."""
        return self.stem_stride

    @property
    def stem_convs(self) -> int:
        return 4 if self.stem_stride == 16 else 3

    def stage_grids(self) -> list[tuple[int, int]]:
        """(h, w) of every stage's grid at ``image_size`` (timm's: // stem stride, then each
        subsample keeps every other row and column, the first included)."""
        h, w = (n // self.stem_stride for n in self.image_size)
        grids = [(h, w)]
        for _ in range(1, self.num_stages):
            h, w = (h - 1) // 2 + 1, (w - 1) // 2 + 1
            grids.append((h, w))
        return grids

    def stage_stride(self, stage: int) -> int:
        """Input pixels per side of a token of ``stage``."""
        return self.stem_stride * 2**stage

    def down_heads(self, stage: int) -> int:
        """Heads of the subsample attention that starts ``stage`` (> 0): timm's
        ``dims[stage - 1] // key_dim``."""
        return self.dims[stage - 1] // self.key_dim

    @property
    def layer_heads(self) -> list[int]:
        """Heads of every attention layer in order (a stage's subsample first)."""
        out = []
        for s, d in enumerate(self.depths):
            if s:
                out.append(self.down_heads(s))
            out += [self.heads[s]] * d
        return out

    @property
    def layer_stages(self) -> list[int]:
        """The stage of every attention layer (a subsample belongs to the stage it starts)."""
        return [s for s, d in enumerate(self.depths) for _ in range(d + (s > 0))]

    @property
    def depth(self) -> int:
        """Attention layers in all stages (the subsamples counted)."""
        return len(self.layer_stages)

    def validate(self) -> None:
        S = self.num_stages
        if S == 0:
            raise ValueError("a LeViT needs at least one stage")
        if {len(self.dims), len(self.heads), len(self.value_dims), len(self.mlp_hidden_dims)} != {
            S
        }:
            raise ValueError(
                "dims, depths, heads, value_dims and mlp_hidden_dims need one per stage"
            )
        for s in range(S):
            if min(self.depths[s], self.heads[s], self.value_dims[s], self.mlp_hidden_dims[s]) < 1:
                raise ValueError(f"stage {s}: depth, heads, value and MLP widths must be positive")
            if s and self.down_heads(s) < 1:
                raise ValueError(f"stage {s}: width {self.dims[s - 1]} is less than key_dim")
        if self.stem_stride not in (8, 16):
            raise ValueError(f"a LeViT's stem stride is 8 or 16, not {self.stem_stride}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"activation is one of {', '.join(ACTIVATIONS)}, not {self.activation!r}"
            )
        if min(self.key_dim, self.in_channels, self.dims[0] // (self.stem_stride // 2)) < 1:
            raise ValueError("key_dim, channels and the stem's first width must be positive")
        if self.num_classes < 0:
            raise ValueError("classes must not be negative")
        if min(self.stage_grids()[0]) < 1:
            raise ValueError(f"image size {self.image_size} is smaller than the stem's stride")
