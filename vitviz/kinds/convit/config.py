"""ConvitConfig: a ConViT (d'Ascoli et al. 2021, "ConViT: Improving Vision Transformers with Soft
Convolutional Inductive Biases") as vitviz rebuilds it: a ViTConfig whose first ``gpsa_depth``
of its ``depth`` blocks are gated positional self-attention (GPSA) over the patches alone.

- ``gpsa_depth`` GPSA blocks over the patches (the CLS token is not there yet);
- the CLS token joins, then ``depth - gpsa_depth`` plain self-attention blocks over
  [CLS, patches];
- the final LayerNorm and the head on the CLS token.

The position table covers the patches only (``no_embed_class``); the GPSA's positions are
offsets on a square patch grid (timm's), so the grid must be square.
"""

from __future__ import annotations

from dataclasses import dataclass

from vitviz.blocks.class_attention import FIXED
from vitviz.blocks.config import ViTConfig


@dataclass
class ConvitConfig(ViTConfig):
    """A ConViT: ``depth`` blocks, the first ``gpsa_depth`` of them GPSA over the patches."""

    gpsa_depth: int = 10  # timm's local_up_to_layer
    no_embed_class: bool = True
    qkv_bias: bool = False

    def is_gpsa_layer(self, layer: int) -> bool:
        """Layer ``layer`` (0-based) is a GPSA block (the CLS token not in it)."""
        return layer < self.gpsa_depth

    def validate(self) -> None:
        super().validate()
        problems = []
        if not 1 <= self.gpsa_depth < self.depth:
            problems.append(
                f"gpsa_depth must be 1..depth-1 (got {self.gpsa_depth} of {self.depth}): the "
                "CLS token joins for the last blocks"
            )
        if self.grid_size[0] != self.grid_size[1]:
            problems.append(f"the patch grid {self.grid_size} must be square (GPSA's offsets)")
        for name, value in FIXED.items():
            if getattr(self, name) != value:
                got = getattr(self, name)
                problems.append(f"{name} must be {value!r} in a ConViT (got {got!r})")
        if self.layer_scale_init is not None:
            problems.append("a ConViT's blocks have no LayerScale")
        if problems:
            raise ValueError("Invalid ConViT config: " + "; ".join(problems))
