"""SwinConfig: every number and switch needed to rebuild vitviz's Swin Transformer (v1).

The three libraries that make Swin checkpoints agree on the weights but not on what happens
when a feature map does not fill whole windows; the layout switches say which one to follow:

- ``shift_first``: timm rolls the map, then pads it at the bottom/right; torchvision and
  Hugging Face pad first, then roll the padded map.
- ``window_clamp``: what a block does when the feature map is not larger than its window.
  "none" (torchvision): keep the window, pad up to it, no shift along an axis the window covers;
  "axis" (timm): window = min(size, window) per axis, no shift along that axis;
  "min" (Hugging Face): when min(H, W) ≤ window, a square window of min(H, W) and no shift.
- ``pad_image``: pad the image to a multiple of the patch (Hugging Face) instead of letting the
  strided convolution drop the remainder (torchvision, timm).

``version`` 2 (Swin V2): cosine attention with a learned per-head logit scale, a continuous
position bias (an MLP over log-spaced offsets, 16·sigmoid), residuals normalised after the
branch (x + norm(f(x))) and patch merging that normalises after the reduction.

``cr`` (timm's ``swinv2_cr_*``, a V2 of its own): the same cosine attention and post-norm
residuals, but its position MLP (``meta_mlp``: Linear, ReLU, Linear, both with biases) reads
sign(d)·ln(1 + |d|) of the raw offsets and its output is the bias as it is (no 16·sigmoid); the
key has a bias; patch merging normalises before the reduction (as v1); the blocks listed in
``extra_norm_blocks`` end with a LayerNorm of the whole map (``norm3``); no final norm when
``final_norm`` is off (the last block's extra norm is its final norm). DESIGN §1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from vitviz.blocks.config import _pair
from vitviz.kinds.staged_config import StagedConfig

WINDOW_CLAMPS = ("none", "axis", "min")


@dataclass
class SwinConfig(StagedConfig):
    """Architecture of a Swin Transformer: stages of window attention joined by patch merging.

    Stage s has ``depths[s]`` blocks of width ``dims[s]`` with ``heads[s]`` heads and windows of
    ``window_sizes[s]`` tokens a side; blocks alternate W-MSA (no shift) and SW-MSA (shift
    ``window_sizes[s] // 2``). Stage s > 0 starts with a 2 × 2 patch merging.
    """

    NOUN: ClassVar[str] = "Swin"

    image_size: tuple[int, int] = (224, 224)
    patch_size: int = 4
    in_channels: int = 3
    num_classes: int = 1000
    dims: tuple[int, ...] = (96, 192, 384, 768)
    depths: tuple[int, ...] = (2, 2, 6, 2)
    heads: tuple[int, ...] = (3, 6, 12, 24)
    window_sizes: tuple[int, ...] = (7, 7, 7, 7)
    mlp_hidden_dims: tuple[int, ...] | None = None  # default: 4 × dims
    qkv_bias: bool = True
    norm_eps: float = 1e-5
    activation: str = "gelu"
    shift_first: bool = False
    window_clamp: str = "none"
    pad_image: bool = False
    drop_path_rate: float = 0.0
    version: int = 1
    pretrained_window_sizes: tuple[int, ...] | None = None  # v2 offsets scale; 0: the window
    cpb_hidden: int = 512  # v2 position-bias MLP width
    cr: bool = False  # timm's swinv2_cr layout (see the module docstring)
    extra_norm_blocks: tuple[int, ...] = ()  # blocks (counted over all stages) ending in norm3
    final_norm: bool = True  # the LayerNorm before the pool

    def __post_init__(self) -> None:
        self.image_size = _pair(self.image_size)
        for name in ("dims", "depths", "heads", "window_sizes"):
            setattr(self, name, tuple(int(v) for v in getattr(self, name)))
        if self.mlp_hidden_dims is not None:
            self.mlp_hidden_dims = tuple(int(v) for v in self.mlp_hidden_dims)
        if self.pretrained_window_sizes is not None:
            self.pretrained_window_sizes = tuple(int(v) for v in self.pretrained_window_sizes)
        self.extra_norm_blocks = tuple(int(v) for v in self.extra_norm_blocks)

    def pretrained_window(self, stage: int) -> int:
        """The window a v2 stage's position offsets are scaled by (0: its own window)."""
        sizes = self.pretrained_window_sizes
        return 0 if sizes is None else sizes[stage]

    def hidden_dim(self, stage: int) -> int:
        if self.mlp_hidden_dims is not None:
            return self.mlp_hidden_dims[stage]
        return 4 * self.dims[stage]

    def validate(self) -> None:
        S = self.num_stages
        if S == 0:
            raise ValueError("a Swin needs at least one stage")
        lengths = {len(self.dims), len(self.heads), len(self.window_sizes)}
        for extra in (self.mlp_hidden_dims, self.pretrained_window_sizes):
            if extra is not None:
                lengths.add(len(extra))
        if lengths != {S}:
            raise ValueError("dims, depths, heads and window_sizes need one entry per stage")
        for s in range(S):
            if self.depths[s] < 1 or self.heads[s] < 1 or self.window_sizes[s] < 1:
                raise ValueError(f"stage {s}: depth, heads and window size must be positive")
            if self.dims[s] % self.heads[s]:
                raise ValueError(
                    f"stage {s}: width {self.dims[s]} is not divisible by {self.heads[s]} heads"
                )
        if self.patch_size < 1 or self.in_channels < 1 or self.num_classes < 0:
            raise ValueError("patch size and channels must be positive, classes not negative")
        if self.version not in (1, 2):
            raise ValueError(f"Swin version must be 1 or 2, got {self.version}")
        if self.cr and self.version != 2:
            raise ValueError("a SwinV2-CR (cr) is a version 2 Swin")
        if any(not 0 <= b < self.depth for b in self.extra_norm_blocks):
            raise ValueError(f"extra_norm_blocks must be blocks 0..{self.depth - 1}")
        if self.window_clamp not in WINDOW_CLAMPS:
            raise ValueError(f"window_clamp must be one of {', '.join(WINDOW_CLAMPS)}")
