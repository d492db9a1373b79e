"""VOLOConfig: every number and switch needed to rebuild vitviz's VOLO (Yuan et al. 2021, timm's
``volo_d1_224`` ... ``volo_d5_512``).

A VOLO's stem is three convolutions with BatchNorm and ReLU (7 × 7 stride 2, then two 3 × 3;
``stem_hidden_dim`` channels, no bias) and a patch convolution (kernel and stride
``patch_size`` / 2): a grid of ``image_size / patch_size`` tokens. Stage 0 is ``depths[0]``
outlooker blocks on that grid (outlook attention: per ``outlook_stride``-pooled position a
Linear gives each head k² × k² weights of the k × k neighbourhood's outputs over its inputs,
folded back with stride ``outlook_stride``); a 2 × 2 strided convolution halves the grid, a
learned position table of that grid is added, then stages 1.. are pre-norm transformer blocks
(``depths[s]`` each). A CLS token joins for ``class_blocks`` class-attention blocks (the CLS
alone queries [CLS, patches]); a final LayerNorm; the logits are head(CLS) + 0.5 · the maximum
over the patch tokens of aux_head(token) (timm's inference; without an aux head, head(CLS)).
Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from vitviz.blocks.config import _pair
from vitviz.kinds.staged_config import StagedConfig


@dataclass
class VOLOConfig(StagedConfig):
    """Architecture of a VOLO: stage 0 outlookers, stages 1.. transformer blocks of
    ``dims[s]`` channels, ``heads[s]`` heads, MLPs of ``mlp_hidden_dims[s]``; the class
    blocks take the last stage's width, heads and MLP width."""

    NOUN: ClassVar[str] = "VOLO"

    image_size: tuple[int, int] = (224, 224)
    patch_size: int = 8  # input pixels per side of a stage-0 token
    stem_hidden_dim: int = 64
    in_channels: int = 3
    num_classes: int = 1000
    depths: tuple[int, ...] = (4, 4, 8, 2)
    dims: tuple[int, ...] = (192, 384, 384, 384)
    heads: tuple[int, ...] = (6, 12, 12, 12)
    mlp_hidden_dims: tuple[int, ...] = (576, 1152, 1152, 1152)
    class_blocks: int = 2  # timm's post_network ("ca", "ca")
    kernel_size: int = 3  # the outlook neighbourhood's side
    outlook_stride: int = 2  # the outlook windows' stride (and the pooling of their weights)
    qkv_bias: bool = False
    aux_head: bool = True  # timm's token-labelling head, its maximum added at inference
    norm_eps: float = 1e-5  # nn.LayerNorm's default, as timm's VOLO uses it

    def __post_init__(self) -> None:
        self.image_size = _pair(self.image_size)
        for name in ("depths", "dims", "heads", "mlp_hidden_dims"):
            setattr(self, name, tuple(int(v) for v in getattr(self, name)))

    @property
    def depth(self) -> int:
        """Attention layers: every stage's blocks and the class blocks."""
        return sum(self.depths) + self.class_blocks

    @property
    def padding(self) -> int:
        """The outlook windows' padding (timm's: k // 2)."""
        return self.kernel_size // 2

    def stage_grids(self) -> list[tuple[int, int]]:
        """(h, w) of stage 0's grid and of the grid after the downsample (stages 1..)."""
        h, w = (n // self.patch_size for n in self.image_size)
        return [(h, w), (h // 2, w // 2)]

    def window_grid(self) -> tuple[int, int]:
        """(h, w) of the outlook windows on stage 0's grid."""
        s = self.outlook_stride
        h, w = self.stage_grids()[0]
        return -(-h // s), -(-w // s)

    def validate(self) -> None:
        S = self.num_stages
        if S < 2:
            raise ValueError("a VOLO has an outlooker stage and at least one transformer stage")
        if {len(self.dims), len(self.heads), len(self.mlp_hidden_dims)} != {S}:
            raise ValueError("depths, dims, heads and mlp_hidden_dims need one per stage")
        if len(set(self.dims[1:])) != 1:
            raise ValueError("a VOLO's stages after the downsample share one width")
        for s in range(S):
            if min(self.depths[s], self.heads[s], self.mlp_hidden_dims[s]) < 1:
                raise ValueError(f"stage {s}: depth, heads and MLP width must be positive")
            if self.dims[s] % self.heads[s]:
                raise ValueError(
                    f"stage {s}: width {self.dims[s]} is not divisible by {self.heads[s]} heads"
                )
        if self.patch_size not in (4, 8, 16):
            raise ValueError(f"a VOLO's patch size is 4, 8 or 16, not {self.patch_size}")
        if any(n % (2 * self.patch_size) for n in self.image_size):
            raise ValueError(
                f"image size {self.image_size} is no multiple of twice the patch size "
                f"{self.patch_size} (the position table's grid after the downsample)"
            )
        if self.kernel_size < 1 or self.kernel_size % 2 == 0 or self.outlook_stride < 1:
            raise ValueError("the outlook kernel is odd and positive, its stride positive")
        if self.class_blocks < 1:
            raise ValueError("vitviz's VOLO has class-attention blocks (timm's post_network)")
        if self.num_classes < 0 or self.in_channels < 1 or self.stem_hidden_dim < 1:
            raise ValueError("classes, channels and the stem's width must be positive")
