"""MViTConfig: every number and switch needed to rebuild vitviz's MViTv2 (Li et al. 2022, timm's
``mvitv2_*``).

A stem Conv2d (kernel ``patch_kernel``, stride ``patch_size``, padding ``patch_padding``) makes
the first stage's grid; an optional CLS token (``use_cls_token``) goes through every block.
Stage s has ``depths[s]`` pre-norm blocks with ``heads[s]`` heads; each block's attention pools
its queries, keys and values on the grid with depthwise convs (kernel ``kernel_qkv``, padding
kernel // 2, no bias) followed by a LayerNorm over a head's channels: the queries with stride
``stride_q[s]`` in a stage's first block only (1 in the others), the keys and values with
``stride_kv[s]`` in every block. Decomposed relative position tables (``rel_pos``) add
q·R_h and q·R_w to the logits; with ``residual_pooling`` the pooled queries are added to each
head's output. Widths change at a stage's first block (``expand_attn``: the attention gives the
new width, else the MLP does), the shortcut then a Linear of the normed input, and max-pooled
(kernel stride + 1) where the queries are. The final LayerNorm and the head on the mean of the
patch tokens, or on the CLS token with one. Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

from vitviz.blocks.config import _pair
from vitviz.kinds.staged_config import StagedConfig


class BlockPlan(NamedTuple):
    """One block: widths in and out, the attention's width, its heads, its pooling strides, the
    grid it reads and the query and key grids it makes."""

    stage: int
    dim_in: int
    dim_out: int
    att_dim: int
    heads: int
    stride_q: tuple[int, int]
    stride_kv: tuple[int, int]
    grid_in: tuple[int, int]
    grid_q: tuple[int, int]
    grid_kv: tuple[int, int]
    table_size: int  # rows of its relative position tables (timm's, set at build)


def _pooled(n: int, kernel: int, stride: int) -> int:
    """Cells of a conv of ``kernel``, ``stride`` and padding kernel // 2 over ``n`` cells."""
    return (n + 2 * (kernel // 2) - kernel) // stride + 1


@dataclass
class MViTConfig(StagedConfig):
    """Architecture of an MViTv2 (``dims``: timm's per-stage ``embed_dim``)."""

    NOUN: ClassVar[str] = "MViTv2"

    image_size: tuple[int, int] = (224, 224)
    in_channels: int = 3
    num_classes: int = 1000
    depths: tuple[int, ...] = (1, 2, 5, 2)
    dims: tuple[int, ...] = (96, 192, 384, 768)
    heads: tuple[int, ...] = (1, 2, 4, 8)
    mlp_ratio: float = 4.0
    expand_attn: bool = True
    use_cls_token: bool = False
    use_abs_pos: bool = False
    residual_pooling: bool = True
    rel_pos: bool = True  # timm's rel_pos_type 'spatial'
    qkv_bias: bool = True
    kernel_qkv: tuple[int, int] = (3, 3)
    stride_q: tuple[tuple[int, int], ...] = ((1, 1), (2, 2), (2, 2), (2, 2))
    stride_kv: tuple[tuple[int, int], ...] = ((4, 4), (2, 2), (1, 1), (1, 1))
    patch_kernel: tuple[int, int] = (7, 7)
    patch_size: int = 4  # the stem's stride: input pixels per side of a first-stage token
    patch_padding: tuple[int, int] = (3, 3)
    norm_eps: float = 1e-6
    global_pool: str = "avg"  # the head reads the mean of the patch tokens, or "token": the CLS

    def __post_init__(self) -> None:
        self.image_size = _pair(self.image_size)
        for name in ("depths", "dims", "heads"):
            setattr(self, name, tuple(int(v) for v in getattr(self, name)))
        for name in ("kernel_qkv", "patch_kernel", "patch_padding"):
            setattr(self, name, tuple(int(v) for v in _pair(getattr(self, name))))
        for name in ("stride_q", "stride_kv"):
            setattr(self, name, tuple(tuple(int(v) for v in s) for s in getattr(self, name)))

    @property
    def num_prefix_tokens(self) -> int:
        return int(self.use_cls_token)

    @property
    def stem_grid(self) -> tuple[int, int]:
        """(h, w) of the stem's output."""
        k, s, p = self.patch_kernel, (self.patch_size,) * 2, self.patch_padding
        return tuple((n + 2 * p[i] - k[i]) // s[i] + 1 for i, n in enumerate(self.image_size))  # type: ignore[return-value]

    def stage_output_dim(self, s: int) -> int:
        """Width of stage ``s``'s output (timm: the next stage's width without expand_attn)."""
        return self.dims[s] if self.expand_attn else self.dims[min(s + 1, self.num_stages - 1)]

    def blocks(self) -> list[BlockPlan]:
        """Every block in order (stage by stage) as timm builds it at ``image_size``."""
        plans: list[BlockPlan] = []
        dim, grid = self.dims[0], self.stem_grid
        k = self.kernel_qkv
        for s in range(self.num_stages):
            out = self.stage_output_dim(s)
            outs = [out] * self.depths[s] if self.expand_attn else (
                [dim] * (self.depths[s] - 1) + [out]
            )  # fmt: skip
            for j in range(self.depths[s]):
                sq = self.stride_q[s] if j == 0 else (1, 1)
                skv = self.stride_kv[s]
                gq = tuple(_pooled(grid[i], k[i], sq[i]) for i in range(2))
                gkv = tuple(_pooled(grid[i], k[i], skv[i]) for i in range(2))
                # timm sizes the tables from the input grid's height and the strides' widths
                table = 2 * max(grid[0] // sq[1], grid[0] // skv[1]) - 1
                att = outs[j] if self.expand_attn else dim
                plans.append(
                    BlockPlan(s, dim, outs[j], att, self.heads[s], sq, skv, grid, gq, gkv, table)  # type: ignore[arg-type]
                )
                dim = outs[j]
                if j == 0:
                    grid = gq  # type: ignore[assignment]
        return plans

    def stage_grids(self) -> list[tuple[int, int]]:
        """(h, w) of every stage's token grid (its first block's queries)."""
        firsts: dict[int, tuple[int, int]] = {}
        for b in self.blocks():
            firsts.setdefault(b.stage, b.grid_q)
        return [firsts[s] for s in range(self.num_stages)]

    def stage_stride(self, stage: int) -> int:
        """Input pixels per side of a token of ``stage`` (the strides multiplied)."""
        px = self.patch_size
        for s in range(stage + 1):
            px *= self.stride_q[s][0]
        return px

    def validate(self) -> None:
        S = self.num_stages
        if S == 0:
            raise ValueError("an MViTv2 needs at least one stage")
        if {len(self.dims), len(self.heads)} != {S} or min(
            len(self.stride_q), len(self.stride_kv)
        ) < S:
            raise ValueError("dims, heads, stride_q and stride_kv need one per stage")
        if min(self.depths) < 1 or min(self.heads) < 1 or min(self.dims) < 1:
            raise ValueError("depths, heads and widths must be positive")
        if min(self.patch_size, self.in_channels) < 1:
            raise ValueError("the stem's stride and the channels must be positive")
        if self.image_size[0] != self.image_size[1]:
            raise ValueError("vitviz's MViTv2 takes square images")
        if any(q[0] != q[1] for q in self.stride_q[:S]):
            raise ValueError("vitviz's MViTv2 takes square query strides")
        if self.kernel_qkv[0] % 2 == 0 or self.kernel_qkv[1] % 2 == 0:
            raise ValueError(f"vitviz's MViTv2 takes odd pooling kernels, not {self.kernel_qkv}")
        for b in self.blocks():
            if b.att_dim % b.heads:
                raise ValueError(
                    f"stage {b.stage}: width {b.att_dim} is not divisible by {b.heads} heads"
                )
            for g, st in ((b.grid_in, b.stride_q), (b.grid_in, b.stride_kv)):
                if g[0] % st[0] or g[1] % st[1] or min(g) < 1:
                    raise ValueError(
                        f"image size {self.image_size} gives stage {b.stage} a {g[0]}×{g[1]} "
                        f"grid that its pooling strides {st} do not divide"
                    )
        if self.global_pool not in ("avg", "token") or (
            self.global_pool == "token" and not self.use_cls_token
        ):
            raise ValueError(
                f"global_pool is 'avg' or (with a CLS token) 'token', not {self.global_pool!r}"
            )
        if self.num_classes < 0:
            raise ValueError("classes must not be negative")
