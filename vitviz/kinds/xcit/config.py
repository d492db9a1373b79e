"""XcitConfig: an XCiT (El-Nouby et al. 2021, "Cross-Covariance Image Transformers") as vitviz
rebuilds it (timm's ``Xcit``):

- a convolutional stem (3 × 3 stride-2 convolutions with BatchNorm, GELU between; 3 of them for
  patch 8, 4 for patch 16) and a Fourier position encoding (sin/cos of the normalised row and
  column, ``pos_hidden`` frequencies each, a 1 × 1 convolution to the width) added to it;
- ``xca_depth`` XCA blocks over the patches: cross-covariance attention (per head a d × d
  softmax over the channels of L2-normalised queries and keys, times a learnt temperature), a
  local patch interaction (two 3 × 3 depthwise convolutions, GELU and BatchNorm between) and an
  MLP, each with LayerScale;
- the CLS token, then ``depth`` class-attention blocks (the CLS queries [CLS, patches]; the
  patches get their own normalised value added, per token; ``tokens_norm``: the second
  LayerNorm over every token, else over the CLS alone); the final LayerNorm and the head on
  the CLS.

``depth`` counts the class-attention blocks: the only layers with token-to-token attention,
what the analysis, the window and the methods read as layers (the XCA blocks' attention is
between channels).
"""

from __future__ import annotations

from dataclasses import dataclass

from vitviz.blocks.class_attention import FIXED
from vitviz.blocks.config import ViTConfig


@dataclass
class XcitConfig(ViTConfig):
    """An XCiT: ``xca_depth`` XCA blocks, then ``depth`` class-attention blocks."""

    xca_depth: int = 12  # cross-covariance attention blocks over the patches
    tokens_norm: bool = True  # class-attention blocks' norm2 over every token (else the CLS)
    pos_hidden: int = 32  # Fourier frequencies per axis of the position encoding
    depth: int = 2
    layer_scale_init: float | None = 1.0  # eta: every XCiT block has LayerScale
    no_embed_class: bool = True
    pos_embed: str = "none"  # the Fourier encoding is computed, not a learnt table

    @property
    def self_depth(self) -> int:
        """Layers where patches query patches in the analysis: none (the XCA blocks attend
        over channels, and are not among the analysis's layers)."""
        return 0

    def validate(self) -> None:
        super().validate()
        problems = []
        if self.xca_depth < 1:
            problems.append(f"xca_depth must be at least 1 (got {self.xca_depth})")
        if self.patch_size not in (8, 16):
            problems.append(
                f"an XCiT's convolutional stem has patch 8 or 16 (got {self.patch_size})"
            )
        if self.layer_scale_init is None:
            problems.append("every XCiT block has LayerScale (layer_scale_init is None)")
        if self.pos_hidden < 1:
            problems.append(f"pos_hidden must be at least 1 (got {self.pos_hidden})")
        for name, value in {**FIXED, "pos_embed": "none"}.items():
            if getattr(self, name) != value:
                problems.append(
                    f"{name} must be {value!r} in an XCiT (got {getattr(self, name)!r})"
                )
        if problems:
            raise ValueError("Invalid XCiT config: " + "; ".join(problems))
