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

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from vitviz.kinds.table_kind import TableKind
from vitviz.kinds.token_layout import TokenLayoutKind

if TYPE_CHECKING:
    from PIL import Image
    from torch import Tensor, nn

    from vitviz.kindapi.intermediates import HeadReplacement, Intermediates
    from vitviz.kindapi.protocol import ImageNumbers, LayerRow, QueryMaps, Session
    from vitviz.kinds.convit.config import ConvitConfig
    from vitviz.kinds.vit.analysis import Analysis


class ConvitKind(TokenLayoutKind):
    """vitviz's ConvitModel (``model_kind`` "convit"): the ViT's analysis on its layout."""

    name = "convit"
    label = "ConViT (gated positional self-attention)"
    METHODS_MODULE = "vitviz.kinds.convit.methods"
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

    @property
    def families(self) -> Sequence[Any]:
        from vitviz.kinds.convit.families import FAMILY

        return (FAMILY,)

    def config_from_dict(self, data: dict[str, object]) -> ConvitConfig:
        from vitviz.kinds.convit.config import ConvitConfig

        return ConvitConfig.from_dict(data)

    def build_from_state(self, config: ConvitConfig, state: Mapping[str, Tensor]) -> nn.Module:
        import torch

        from vitviz.checkpoints.assign import assign_exactly
        from vitviz.kinds.convit.network import ConvitModel

        with torch.device("meta"):
            model = ConvitModel(config)
        return assign_exactly(model, state, "ConViT model")

    def library_outputs(self, model: nn.Module, x: Tensor) -> tuple[Tensor, Sequence[Tensor]]:
        """timm's shapes: (B, H, P, P) of each GPSA layer, (B, H, 1 + P, 1 + P) of the others."""
        out = model.forward_explained(x, capture_attention=True)
        S = model.config.gpsa_depth
        maps = [a[:, :, 1:, 1:] if i < S else a for i, a in enumerate(out.attentions)]
        return out.logits, maps

    def intermediates(
        self,
        model: nn.Module,
        x: Tensor,
        *,
        replace: HeadReplacement | None = None,
        logits_only: bool = False,
    ) -> Intermediates:
        from vitviz.kinds.convit.intermediates import convit_intermediates

        return convit_intermediates(model, x, replace=replace, logits_only=logits_only)

    def readout(self, model: Any) -> Any:
        """head(norm(CLS)); before the CLS joins, of the mean patch token (DESIGN §5)."""
        from vitviz.kinds.readouts import class_attention_readout

        return class_attention_readout(model)

    def analysis_blocks(self, analysis: Any) -> None:
        """None: its blocks' outputs are laid out per block kind (GPSA or plain), which only
        its accessor knows; the feature views run that (DESIGN §5)."""
        return None

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

    def layer_rows(self, analysis: Analysis) -> tuple[LayerRow, ...]:
        """ "GPSA i" for the GPSA layers, "SA j" for the plain ones."""
        from vitviz.kinds.convit.methods import gpsa_layers

        S, L = gpsa_layers(analysis)
        rows = []
        for row, layer in zip(super().layer_rows(analysis), analysis.layer_indices, strict=True):
            if layer < S:
                label, what = f"GPSA {layer}", "gated positional self-attention over the patches"
            else:
                label, what = f"SA {layer - S}", "self-attention over [CLS, patches]"
            rows.append(
                dataclasses.replace(
                    row,
                    label=label,
                    tooltip=f"layer {layer} of 0–{L - 1}: {what}",
                    title=f"layer {layer} of 0–{L - 1} ({label}: {what})",
                    hover=f"layer {layer} ({label})",
                    selector=f" · {label}",
                )
            )
        return tuple(rows)

    def image_numbers(self, session: Session) -> ImageNumbers:
        # attention None: the window asks query_maps, which blanks the rows a query lacks
        from vitviz.kindapi.protocol import ViewWords

        numbers = super().image_numbers(session)
        words = ViewWords(query_none="CLS token (the layers after the GPSA blocks)")
        rows = self.layer_rows(session.analysis)
        return dataclasses.replace(numbers, attention=None, words=words, layer_rows=rows)

    def query_maps(self, session: Session, query: tuple[int, int] | None) -> QueryMaps:
        """The ViT's maps, NaN (blank) in the GPSA layers for the CLS query (it is not there)."""
        import numpy as np

        from vitviz.imaging.colormaps import nice_levels
        from vitviz.kinds.convit.methods import gpsa_layers

        maps = super().query_maps(session, query)
        S, _ = gpsa_layers(session.analysis)
        gpsa = [row for row, layer in enumerate(session.analysis.layer_indices) if layer < S]
        head, mean = maps.head_maps.copy(), maps.mean_maps.copy()
        prefix = maps.prefix_attention.copy()
        prefix[gpsa] = np.nan  # no CLS key there
        if query is None:
            head[gpsa], mean[gpsa] = np.nan, np.nan
        finite = head[np.isfinite(head)]
        return dataclasses.replace(
            maps,
            head_maps=head,
            mean_maps=mean,
            layer_maps=tuple(head),
            prefix_attention=prefix,
            levels=nice_levels(np.array([finite.min(), finite.max()]))
            if finite.size
            else (0.0, 1.0),
        )

    def heads_picture(self, analysis: Analysis, colormap: str, titled: bool) -> Image.Image:
        """The CLS's maps of every layer and head (``<stem>_heads.png``), the GPSA rows blank
        (the CLS is not there)."""
        import numpy as np

        from vitviz.kinds.convit.methods import gpsa_layers
        from vitviz.pipeline.export import heads_figure

        S, _ = gpsa_layers(analysis)
        maps = analysis.all_attention_maps(None).numpy().copy()
        maps[[row for row, layer in enumerate(analysis.layer_indices) if layer < S]] = np.nan
        return heads_figure(
            maps,
            maps.mean(axis=1),
            analysis,
            row_names=[r.label for r in self.layer_rows(analysis)],
            title="Attention of every layer and head",
            query="query CLS (the layers after the GPSA blocks; GPSA rows blank)",
            colormap=colormap,
            titled=titled,
        )

    # the window's head grid as it shows it (blank rows included), titled
    view_heads_picture = TableKind.view_heads_picture

    def heads_query_words(self, query: tuple[int, int] | None, analysis: Any = None) -> str:
        if query is None:
            return "query CLS (the layers after the GPSA blocks; GPSA rows blank)"
        return f"query patch ({query[0]}, {query[1]})"


KIND = ConvitKind()
