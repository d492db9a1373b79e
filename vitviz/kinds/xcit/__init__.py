"""The XCiT kind: timm's XCiT (XCA blocks whose attention is between channels, then
class-attention blocks where the CLS queries [CLS, patches]).

Its token-to-token maps come only from its class-attention blocks: those are the analysis's
layers ("CA 0", "CA 1"), in the class-attention layout (``vitviz.kinds.class_attention``: the
CLS row, identity below), with no self-attention layer.
What each method is here:

- raw attention, DINO masks, attention Grad-CAM: the CLS's row of a class-attention block; a
  patch has no row in any layer (refused with the reason; the window leaves its thumbnails
  blank);
- rollout, gradient rollout, relevance, Grad-SAM: through the class-attention blocks only, from
  the CLS (DESIGN §5's definitions on their rows). The XCA blocks mix the tokens through the
  channel covariance of all of them and through 3 × 3 convolutions (LPI): no token-to-token
  matrix to chain, so the chain stops there, and the model info and docs/checkpoints.md say so;
- token Grad-CAM: on the last class-attention block's first LayerNorm;
- transformer attribution: the CLS's chain through the class-attention layers with R_A^l (the
  LRP relevance of each CLS row, from the head down through the later class-attention blocks,
  by the ViT's rules: ``vitviz.kinds.xcit.attribution``) for A; the XCA blocks are below every
  map layer, so no relevance goes into them (they have no rule and need none). A patch query is
  refused as for relevance.

The load-time check against timm compares every XCA block's (H, d, d) channel attention and
every class-attention block's (H, 1, 1 + P) row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from vitviz.kinds.class_attention import ClassAttentionLayers
from vitviz.kinds.declared import DeclaredModules
from vitviz.kinds.token_layout import TokenLayoutKind

if TYPE_CHECKING:
    from torch import Tensor, nn


class XcitKind(ClassAttentionLayers, DeclaredModules, TokenLayoutKind):
    """vitviz's XcitModel (``model_kind`` "xcit"): the ViT's analysis on its class-attention
    layers only (``ClassAttentionLayers``)."""

    name = "xcit"
    label = "XCiT (cross-covariance image transformer)"
    METHODS_MODULE = "vitviz.kinds.xcit.methods"
    CONFIG = "vitviz.kinds.xcit.config:XcitConfig"
    NETWORK = "vitviz.kinds.xcit.network:XcitModel"
    FAMILIES = ("vitviz.kinds.xcit.families:FAMILY",)
    # the ViT's accessor on its own blocks
    INTERMEDIATES = "vitviz.kinds.xcit.intermediates:xcit_intermediates"
    MODEL_NOUN = "XCiT"
    OWNER = "a ViT"  # the words the ViT kind's refusal gave it

    def architecture(self, model: nn.Module) -> str:
        cfg = model.config
        return (
            f"dim {cfg.dim}, {cfg.xca_depth} XCA + {cfg.depth} class-attention layers, "
            f"heads {cfg.heads}"
        )

    def parts(self, model: nn.Module) -> tuple[str, ...]:
        cfg = model.config
        norm = "every token" if cfg.tokens_norm else "the CLS token"
        return (
            f"{cfg.xca_depth} XCA blocks (cross-covariance attention between channels, a local "
            "patch interaction of 3 × 3 depthwise convolutions with BatchNorm; no token maps)",
            f"{cfg.depth} class-attention blocks (the CLS queries [CLS, patches]: the token "
            f"maps; second LayerNorm over {norm})",
            f"pre-norm blocks (LayerNorm eps {cfg.norm_eps:g})",
            "GELU MLP",
            "LayerScale",
            "Fourier position encoding (computed for any grid)",
            "CLS token inserted before the class-attention blocks",
            "head reads the CLS token",
            f"convolutional stem ({cfg.patch_size.bit_length() - 1} 3 × 3 stride-2 convolutions "
            "with BatchNorm)",
        )

    def library_outputs(self, model: nn.Module, x: Tensor) -> tuple[Tensor, Sequence[Tensor]]:
        """timm's shapes: (B, H, d, d) of each XCA block, (B, H, 1, 1 + P) of each
        class-attention block."""
        return model.forward_library(x)

    def cam_blocks(self, model: nn.Module) -> Sequence[nn.Module]:
        """The XCA blocks, then the class-attention blocks (the accessor's ``blocks``)."""
        return [*model.xca_blocks, *model.blocks]


KIND = XcitKind()
