"""The ConViT kind: timm's ConViT (gated positional self-attention blocks over the patches, then
plain self-attention blocks once the CLS token joins).

Its network (``network.ConvitModel``) hands every layer's attention over in one layout,
(H, 1 + P, 1 + P) over [CLS, patches], a GPSA layer's CLS row the identity (see ``network``), so
the ViT's analysis, capture, export and window run on it unchanged; this kind says what
differs: its family, its layer rows ("GPSA 2", "SA 0"), which query has a row in which layer
(the CLS none in a GPSA layer: the head grid leaves those blank), its methods on that layout
(``methods``) and what the library check compares (each layer's own matrix: (H, P, P) of a
GPSA block, (H, 1 + P, 1 + P) of a plain one, as timm computes them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from vitviz.kinds.declared import DeclaredModules
from vitviz.kinds.late_cls import LateClsLayers
from vitviz.kinds.token_layout import TokenLayoutKind

if TYPE_CHECKING:
    from torch import Tensor, nn

    from vitviz.kinds.vit.analysis import Analysis


class ConvitKind(LateClsLayers, DeclaredModules, TokenLayoutKind):
    """vitviz's ConvitModel (``model_kind`` "convit"): the ViT's analysis on its layout, its
    GPSA layers the ones before the CLS joins (``LateClsLayers``)."""

    EARLY_ROWS = ("GPSA", "gated positional self-attention over the patches")
    LATE_ROWS = ("SA", "self-attention over [CLS, patches]")
    CLS_QUERY = "CLS token (the layers after the GPSA blocks)"
    CLS_HEADS = "query CLS (the layers after the GPSA blocks; GPSA rows blank)"

    name = "convit"
    label = "ConViT (gated positional self-attention)"
    METHODS_MODULE = "vitviz.kinds.convit.methods"
    CONFIG = "vitviz.kinds.convit.config:ConvitConfig"
    NETWORK = "vitviz.kinds.convit.network:ConvitModel"
    FAMILIES = ("vitviz.kinds.convit.families:FAMILY",)
    # the ViT's accessor on its own blocks
    INTERMEDIATES = "vitviz.kinds.convit.intermediates:convit_intermediates"
    MODEL_NOUN = "ConViT"
    OWNER = "a ViT"

    def architecture(self, model: nn.Module) -> str:
        cfg = model.config
        return (
            f"dim {cfg.dim}, {cfg.gpsa_depth} GPSA + {cfg.depth - cfg.gpsa_depth} "
            f"self-attention layers, heads {cfg.heads}"
        )

    def parts(self, model: nn.Module) -> tuple[str, ...]:
        cfg = model.config
        return (
            f"{cfg.gpsa_depth} gated positional self-attention (GPSA) blocks over the patches "
            "(content and positional softmaxes mixed by a learnt gate per head)",
            f"{cfg.depth - cfg.gpsa_depth} self-attention blocks over [CLS, patches]",
            f"pre-norm blocks (LayerNorm eps {cfg.norm_eps:g})",
            "GELU MLP",
            "a learnt position table over the patches",
            "CLS token inserted after the GPSA blocks",
            "head reads the CLS token",
            "Conv2d patch embedding",
        )

    def library_outputs(self, model: nn.Module, x: Tensor) -> tuple[Tensor, Sequence[Tensor]]:
        """timm's shapes: (B, H, P, P) of each GPSA layer, (B, H, 1 + P, 1 + P) of the others."""
        out = model.forward_explained(x, capture_attention=True)
        S = model.config.gpsa_depth
        maps = [a[:, :, 1:, 1:] if i < S else a for i, a in enumerate(out.attentions)]
        return out.logits, maps

    def early_layers(self, analysis: Any) -> tuple[int, int]:
        from vitviz.kinds.convit.methods import gpsa_layers

        return gpsa_layers(analysis)

    def finish_analysis(self, analysis: Analysis) -> Analysis:
        """The prefix share of a GPSA layer is NaN: there is no CLS key there (DESIGN §5)."""
        from vitviz.kinds.convit.methods import gpsa_layers

        S, _ = gpsa_layers(analysis)
        rows = [row for row, layer in enumerate(analysis.layer_indices) if layer < S]
        if rows:
            share = analysis.prefix_share.clone()
            share[rows] = float("nan")
            analysis.prefix_share = share
        return analysis

    def heads_query_words(self, query: tuple[int, int] | None, analysis: Any = None) -> str:
        if query is None:
            return self.CLS_HEADS
        return f"query patch ({query[0]}, {query[1]})"


KIND = ConvitKind()
