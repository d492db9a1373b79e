"""The CaiT kind: timm's CaiT (self-attention blocks with talking heads over the patches, then
class-attention blocks where only the CLS queries [CLS, patches]).

Its network (``network.CaitModel``) hands every layer's attention over in one layout,
(H, 1 + P, 1 + P) over [CLS, patches], the rows of the tokens a layer does not update being the
identity (see ``network``), so the ViT's analysis, capture, export and window run on it
unchanged; this kind says what differs: its families, its layer rows ("SA 2", "CA 0"), which
query has a row in which layer (``methods.query_problem``; the head grid leaves the others
blank), its methods' definitions on that layout (``methods``), its head statistics
(``stats``), and what the library check compares (each layer's own matrix: (H, P, P) of a
self-attention block, (H, 1, 1 + P) of a class-attention block, as timm computes them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from vitviz.kinds.class_attention import ClassAttentionLayers
from vitviz.kinds.declared import DeclaredModules
from vitviz.kinds.token_layout import TokenLayoutKind

if TYPE_CHECKING:
    from torch import Tensor, nn


class CaitKind(ClassAttentionLayers, DeclaredModules, TokenLayoutKind):
    """vitviz's CaitModel (``model_kind`` "cait"): the ViT's analysis on its captured layout
    (``ClassAttentionLayers``: its rows, blank queries, statistics and npz)."""

    name = "cait"
    label = "CaiT (class-attention image transformer)"
    METHODS_MODULE = "vitviz.kinds.cait.methods"
    CONFIG = "vitviz.kinds.cait.config:CaitConfig"
    NETWORK = "vitviz.kinds.cait.network:CaitModel"
    FAMILIES = ("vitviz.kinds.cait.families:FAMILY",)
    # the ViT's accessor on its own blocks
    INTERMEDIATES = "vitviz.kinds.cait.intermediates:cait_intermediates"
    MODEL_NOUN = "CaiT"
    OWNER = "a ViT"  # the words the ViT kind's refusal gave it

    def architecture(self, model: nn.Module) -> str:
        cfg = model.config
        return (
            f"dim {cfg.dim}, {cfg.self_depth} self-attention + {cfg.class_depth} "
            f"class-attention layers, heads {cfg.heads}"
        )

    def parts(self, model: nn.Module) -> tuple[str, ...]:
        cfg = model.config
        return (
            f"{cfg.self_depth} talking-heads self-attention blocks over the patches "
            "(heads mixed before and after the softmax)",
            f"{cfg.class_depth} class-attention blocks (only the CLS queries [CLS, patches])",
            f"pre-norm blocks (LayerNorm eps {cfg.norm_eps:g})",
            "GELU MLP",
            "LayerScale",
            "a learnt position table over the patches",
            "CLS token inserted before the class-attention blocks",
            "head reads the CLS token",
            "Conv2d patch embedding",
        )

    def library_outputs(self, model: nn.Module, x: Tensor) -> tuple[Tensor, Sequence[Tensor]]:
        """timm's shapes: (B, H, P, P) of each self-attention layer, (B, H, 1, 1 + P) of each
        class-attention layer."""
        out = model.forward_explained(x, capture_attention=True)
        S = model.config.self_depth
        maps = [a[:, :, 1:, 1:] if i < S else a[:, :, :1] for i, a in enumerate(out.attentions)]
        return out.logits, maps


KIND = CaitKind()
