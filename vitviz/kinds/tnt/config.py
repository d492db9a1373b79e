"""TNTConfig: every number and switch needed to rebuild vitviz's TNT (Transformer in Transformer,
Han et al. 2021; timm's ``tnt_*``).

The image is cut into ``patch_size`` patches (a grid of ``image_size / patch_size``); each patch
becomes a sub-grid of ``inner_dim``-wide pixel tokens by a 7×7 Conv2d of stride ``first_stride``
(padding 3; ``legacy``: the conv runs over the whole image and its output is cut into the
sub-grids, else it runs on each patch alone) plus ``pixel_pos``. The patch (outer) tokens are a
LayerNorm -> Linear -> LayerNorm of each patch's pixel tokens, after a CLS token, plus
``patch_pos``. Each of ``depth`` blocks runs an inner pre-norm transformer block over each
patch's pixel tokens (``inner_heads`` heads, MLP ratio 4), adds a projection of the patch's
pixel tokens to its patch token (``legacy``: LayerNorm per pixel token, Linear with a bias; else
LayerNorm over the patch's pixel tokens together, Linear, LayerNorm), then an outer pre-norm
transformer block over [CLS, patches] (``heads`` heads). The final LayerNorm and the head on the
CLS token (``global_pool`` "token") or the mean of the patch tokens ("avg"). Torch-free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from vitviz.blocks.config import _pair
from vitviz.kinds.staged_config import StagedConfig


@dataclass
class TNTConfig(StagedConfig):
    """Architecture of a TNT: one stage (``depths`` (depth,), ``dims`` (embed_dim,), ``heads``
    (outer heads,)), as the staged kinds' tables read it."""

    NOUN: ClassVar[str] = "TNT"

    image_size: tuple[int, int] = (224, 224)
    in_channels: int = 3
    num_classes: int = 1000
    patch_size: int = 16
    depths: tuple[int, ...] = (12,)
    dims: tuple[int, ...] = (384,)
    heads: tuple[int, ...] = (6,)
    inner_dim: int = 24
    inner_heads: int = 4
    first_stride: int = 4
    mlp_ratio: float = 4.0
    qkv_bias: bool = False
    legacy: bool = False
    norm_eps: float = 1e-5
    global_pool: str = "token"

    def __post_init__(self) -> None:
        self.image_size = _pair(self.image_size)
        for name in ("depths", "dims", "heads"):  # one stage: a number is taken as its one
            value = getattr(self, name)
            value = (value,) if isinstance(value, int) else value
            setattr(self, name, tuple(int(v) for v in value))

    num_prefix_tokens: ClassVar[int] = 1  # the CLS token

    @property
    def embed_dim(self) -> int:
        return self.dims[0]

    @property
    def grid(self) -> tuple[int, int]:
        """(h, w) of the patch grid."""
        return (self.image_size[0] // self.patch_size, self.image_size[1] // self.patch_size)

    @property
    def pixel_grid(self) -> tuple[int, int]:
        """(h, w) of a patch's pixel tokens: ceil(patch / first_stride) a side."""
        n = math.ceil(self.patch_size / self.first_stride)
        return (n, n)

    @property
    def num_pixels(self) -> int:
        return self.pixel_grid[0] * self.pixel_grid[1]

    def stage_grids(self) -> list[tuple[int, int]]:
        return [self.grid]

    def validate(self) -> None:
        if len(self.depths) != 1 or len(self.dims) != 1 or len(self.heads) != 1:
            raise ValueError("a TNT has one stage: depths, dims and heads hold one number each")
        if min(self.depths[0], self.dims[0], self.heads[0], self.inner_dim, self.inner_heads) < 1:
            raise ValueError("depth, widths and heads must be positive")
        if self.dims[0] % self.heads[0]:
            raise ValueError(f"width {self.dims[0]} is not divisible by {self.heads[0]} heads")
        if self.inner_dim % self.inner_heads:
            raise ValueError(
                f"inner width {self.inner_dim} is not divisible by {self.inner_heads} inner heads"
            )
        if min(self.patch_size, self.first_stride, self.in_channels) < 1:
            raise ValueError("the patch size, the pixel stride and the channels must be positive")
        if self.image_size[0] % self.patch_size or self.image_size[1] % self.patch_size:
            raise ValueError(
                f"image size {self.image_size} is no multiple of the patch size {self.patch_size}"
            )
        if self.legacy and self.patch_size % self.first_stride:
            raise ValueError(
                f"a legacy TNT's patch size {self.patch_size} must be a multiple of its pixel "
                f"stride {self.first_stride}"
            )
        if self.global_pool not in ("token", "avg"):
            raise ValueError(f"global_pool is 'token' or 'avg', not {self.global_pool!r}")
        if self.num_classes < 0:
            raise ValueError("classes must not be negative")
