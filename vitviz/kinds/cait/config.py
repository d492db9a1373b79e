"""CaitConfig: a CaiT (Touvron et al. 2021, "Going deeper with Image Transformers") as vitviz
rebuilds it: a ViTConfig whose last ``class_depth`` of its ``depth`` attention layers are
class-attention blocks.

- ``depth - class_depth`` self-attention blocks over the patches only (no CLS token yet), with
  talking-heads attention (the heads mixed by a Linear before the softmax and by another after
  it) and LayerScale;
- the CLS token inserted before ``class_depth`` class-attention blocks, where only the CLS
  queries [CLS, patches] and only the CLS is updated (its MLP too; the patches pass unchanged);
- the final LayerNorm and the head on the CLS token.

The position table covers the patches only (``no_embed_class``); ``depth`` counts every
attention layer (what the analysis, its memory plan and the window read as layers).
"""

from __future__ import annotations

from dataclasses import dataclass

from vitviz.blocks.class_attention import FIXED
from vitviz.blocks.config import ViTConfig


@dataclass
class CaitConfig(ViTConfig):
    """A CaiT: ``depth`` attention layers, the last ``class_depth`` of them class attention."""

    class_depth: int = 2  # class-attention blocks (timm's depth_token_only)
    class_mlp_hidden_dim: int | None = None  # their MLP width; None: as the other blocks'
    layer_scale_init: float | None = 1e-5  # every CaiT block has LayerScale (gamma_1, gamma_2)
    no_embed_class: bool = True

    @property
    def self_depth(self) -> int:
        """Self-attention (talking-heads) blocks over the patches: the first layers."""
        return self.depth - self.class_depth

    @property
    def class_hidden_dim(self) -> int:
        return self.class_mlp_hidden_dim or self.hidden_dim

    def is_class_layer(self, layer: int) -> bool:
        """Layer ``layer`` (0-based) is a class-attention block."""
        return layer >= self.self_depth

    def validate(self) -> None:
        super().validate()
        problems = []
        if self.class_depth < 1:
            problems.append(f"class_depth must be at least 1 (got {self.class_depth})")
        if self.depth <= self.class_depth:
            problems.append(
                f"depth {self.depth} must exceed class_depth {self.class_depth} (at least one "
                "self-attention block)"
            )
        if self.layer_scale_init is None:
            problems.append("a CaiT's blocks all have LayerScale (layer_scale_init is None)")
        for name, value in FIXED.items():
            if getattr(self, name) != value:
                problems.append(f"{name} must be {value!r} in a CaiT (got {getattr(self, name)!r})")
        if problems:
            raise ValueError("Invalid CaiT config: " + "; ".join(problems))
