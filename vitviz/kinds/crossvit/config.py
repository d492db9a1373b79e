"""CrossViTConfig: every number and switch needed to rebuild vitviz's CrossViT (Chen et al. 2021,
timm's ``crossvit_*``).

Two branches see the same square image: branch 0 at its size with patches of ``patch_sizes[0]``,
branch 1 resized (bicubic, as timm's ``scale_image``) to ``branch_sizes[1]`` with patches of
``patch_sizes[1]``. Each has a CLS token and a learned position table. Multi-scale block k runs
``block_depths[k][b]`` pre-norm ViT blocks on branch b, then fuses: each branch's CLS, projected
(LayerNorm, GELU, Linear) to the other branch's width, attends over [itself, the other branch's
patches] (one cross-attention layer with the other branch's head count) and is projected back.
A final LayerNorm per branch, a head per branch on its CLS (or its patches' mean); the logits are
the mean of the two heads. Torch-free.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from vitviz.blocks.config import _pair

BRANCHES = 2


@dataclass
class CrossViTConfig:
    """Architecture of a CrossViT with two branches (b = 0, 1)."""

    image_size: tuple[int, int] = (240, 240)  # the square input; branch 0 reads it as it is
    branch_sizes: tuple[int, ...] = (240, 224)  # side of each branch's (resized) image
    patch_sizes: tuple[int, ...] = (12, 16)
    dims: tuple[int, ...] = (96, 192)
    heads: tuple[int, ...] = (3, 3)
    mlp_hidden_dims: tuple[int, ...] = (384, 768)  # each branch's blocks' MLP width
    block_depths: tuple[tuple[int, ...], ...] = ((1, 4), (1, 4), (1, 4))
    multi_conv: bool = False  # the ``_dagger_`` stem: three convs instead of one
    global_pool: str = "token"  # "token": the heads read the CLS; "avg": the patches' mean
    in_channels: int = 3
    num_classes: int = 1000
    qkv_bias: bool = True
    norm_eps: float = 1e-6

    def __post_init__(self) -> None:
        self.image_size = _pair(self.image_size)
        for name in ("branch_sizes", "patch_sizes", "dims", "heads", "mlp_hidden_dims"):
            setattr(self, name, tuple(int(v) for v in getattr(self, name)))
        self.block_depths = tuple(tuple(int(v) for v in d) for d in self.block_depths)

    # -- the token layout ----------------------------------------------------------------------
    def grid(self, branch: int) -> tuple[int, int]:
        """(h, w) of ``branch``'s patch grid."""
        n = self.branch_sizes[branch] // self.patch_sizes[branch]
        return n, n

    def stem_grid(self, branch: int) -> tuple[int, int]:
        """(h, w) the stem gives at the branch's size (the conv stem's arithmetic)."""
        n, p = self.branch_sizes[branch], self.patch_sizes[branch]
        if not self.multi_conv:
            return n // p, n // p
        convs = [(7, 4, 3), (3, 3, 0), (3, 1, 1)] if p == 12 else [(7, 4, 3), (3, 2, 1), (3, 2, 1)]
        for k, s, pad in convs:
            n = (n + 2 * pad - k) // s + 1
        return n, n

    def token_pixels(self, branch: int) -> float:
        """Input pixels per side of a token of ``branch`` (its patch, scaled back from its resized
        image: 16 · 240 / 224 for timm's branch 1); an int where it is one."""
        px = self.patch_sizes[branch] * self.image_size[0] / self.branch_sizes[branch]
        return int(px) if float(px).is_integer() else px

    def layers(self) -> list[tuple[int, str, int]]:
        """Every attention layer in the order the network runs it: (multi-scale block,
        "self" or "cross", branch). A cross layer of branch b is b's CLS over the other's
        patches."""
        out = []
        for k, depths in enumerate(self.block_depths):
            for b in range(BRANCHES):
                out.extend((k, "self", b) for _ in range(depths[b]))
            out.extend((k, "cross", b) for b in range(BRANCHES))
        return out

    def layer_heads(self) -> list[int]:
        """Each layer's heads: a branch's own in its blocks, the other branch's in its cross
        layer (the CLS attends at the other branch's width)."""
        return [self.heads[b if how == "self" else 1 - b] for _k, how, b in self.layers()]

    @property
    def depth(self) -> int:
        """Attention layers in all."""
        return len(self.layers())

    @property
    def patch_size(self) -> int:
        """Input pixels per side of a branch-0 token: the clickable cell."""
        return self.patch_sizes[0]

    @property
    def dim(self) -> int:
        return self.dims[0]

    def validate(self) -> None:
        pairs = ("branch_sizes", "patch_sizes", "dims", "heads", "mlp_hidden_dims")
        if any(len(getattr(self, n)) != BRANCHES for n in pairs):
            raise ValueError(f"a CrossViT has two branches: {', '.join(pairs)} need two each")
        if not self.block_depths or any(
            len(d) != BRANCHES or min(d) < 1 for d in self.block_depths
        ):
            raise ValueError("every multi-scale block needs at least one block on each branch")
        if self.image_size[0] != self.image_size[1]:
            raise ValueError(f"vitviz's CrossViT takes a square input, not {self.image_size}")
        if self.branch_sizes[0] != self.image_size[0]:
            raise ValueError("vitviz's CrossViT reads the input at its size on branch 0")
        for b in range(BRANCHES):
            if self.dims[b] % self.heads[b]:
                raise ValueError(
                    f"branch {b}: width {self.dims[b]} is not divisible by {self.heads[b]} heads"
                )
            if min(self.grid(b)) < 1:
                raise ValueError(f"branch {b}: its image is smaller than a patch")
            if self.multi_conv and self.patch_sizes[b] not in (12, 16):
                raise ValueError("the conv stem (multi_conv) is defined for patches 12 and 16")
            if self.stem_grid(b) != self.grid(b):
                raise ValueError(
                    f"branch {b}: its stem gives a {self.stem_grid(b)} grid at "
                    f"{self.branch_sizes[b]} px, its position table is for {self.grid(b)}"
                )
        if self.global_pool not in ("token", "avg"):
            raise ValueError(f"global_pool is 'token' or 'avg', not {self.global_pool!r}")
        if self.num_classes < 0:
            raise ValueError("classes must not be negative")

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out = {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}
        out["block_depths"] = [list(d) for d in self.block_depths]
        out["patch_size"] = self.patch_size  # the clickable cell, as every kind's dict says it
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CrossViTConfig:
        """The config of ``to_dict``'s dict; ValueError naming fields it does not know."""
        data = {k: v for k, v in data.items() if k != "patch_size"}  # derived (``to_dict``)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown CrossViT config fields: {', '.join(unknown)}")
        return cls(**data)
