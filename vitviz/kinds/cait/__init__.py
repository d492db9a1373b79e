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

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from vitviz.kindapi.protocol import KindMethod, LayerRow, ViewWords
from vitviz.kinds.vit import ViTKind

if TYPE_CHECKING:
    import numpy as np
    from PIL import Image
    from torch import Tensor, nn

    from vitviz.kindapi.intermediates import HeadReplacement, Intermediates
    from vitviz.kindapi.protocol import ImageNumbers, QueryMaps, Session
    from vitviz.kinds.cait.config import CaitConfig
    from vitviz.kinds.vit.analysis import Analysis


def _self_depth(analysis: Any) -> tuple[int, int]:
    cfg = analysis.loaded.model.config
    return int(cfg.self_depth), int(cfg.depth)


def _rows_without(analysis: Any, query: tuple[int, int] | None) -> list[int]:
    """The rows (of the kept layers) where ``query`` (None: the CLS) has no row of attention."""
    from vitviz.kinds.cait.methods import query_problem

    S, L = _self_depth(analysis)
    return [
        row
        for row, layer in enumerate(analysis.layer_indices)
        if query_problem(S, L, layer, query) is not None
    ]


class CaitKind(ViTKind):
    """vitviz's CaitModel (``model_kind`` "cait"): the ViT's analysis on its captured layout."""

    name = "cait"
    label = "CaiT (class-attention image transformer)"
    catch_all = False

    def owns(self, model: nn.Module) -> bool:
        return getattr(model, "model_kind", None) == self.name

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

    @property
    def families(self) -> Sequence[Any]:
        from vitviz.kinds.cait.families import FAMILY

        return (FAMILY,)

    def config_from_dict(self, data: dict[str, object]) -> CaitConfig:
        from vitviz.kinds.cait.config import CaitConfig

        return CaitConfig.from_dict(data)

    def build_from_state(self, config: CaitConfig, state: Mapping[str, Tensor]) -> nn.Module:
        import torch

        from vitviz.checkpoints.assign import assign_exactly
        from vitviz.kinds.cait.network import CaitModel

        with torch.device("meta"):
            model = CaitModel(config)
        return assign_exactly(model, state, "CaiT model")

    def library_outputs(self, model: nn.Module, x: Tensor) -> tuple[Tensor, Sequence[Tensor]]:
        """timm's shapes: (B, H, P, P) of each self-attention layer, (B, H, 1, 1 + P) of each
        class-attention layer."""
        out = model.forward_explained(x, capture_attention=True)
        S = model.config.self_depth
        maps = [a[:, :, 1:, 1:] if i < S else a[:, :, :1] for i, a in enumerate(out.attentions)]
        return out.logits, maps

    @property
    def training(self) -> None:
        return None  # vitviz trains ViTs and Swins, not CaiTs

    def finish_analysis(self, analysis: Analysis) -> Analysis:
        from vitviz.kinds.cait.stats import class_layer_statistics

        S, _ = _self_depth(analysis)
        stats = class_layer_statistics(
            analysis.attention,
            analysis.layer_indices,
            S,
            analysis.mean_distance,
            analysis.entropy,
            analysis.prefix_share,
        )
        analysis.mean_distance, analysis.entropy, analysis.prefix_share = stats
        return analysis

    def intermediates(
        self, model: nn.Module, x: Tensor, *, replace: HeadReplacement | None = None
    ) -> Intermediates:
        """The ViT's accessor on its own blocks (``vitviz.kinds.cait.intermediates``)."""
        from vitviz.kinds.cait.intermediates import cait_intermediates

        return cait_intermediates(model, x, replace=replace)

    def implementation(self, method: str) -> KindMethod | None:
        from vitviz.kinds.cait.methods import METHODS

        return METHODS.get(method)

    def missing_method(self, method: str) -> str | None:
        from vitviz.kinds.cait.methods import CANNOT

        return CANNOT.get(method)

    def layer_rows(self, analysis: Analysis) -> tuple[LayerRow, ...]:
        """ "SA i" for the self-attention layers, "CA j" for the class-attention layers."""
        S, L = _self_depth(analysis)
        rows = []
        for row, layer in zip(super().layer_rows(analysis), analysis.layer_indices, strict=True):
            if layer < S:
                label, what = f"SA {layer}", "self-attention over the patches (talking heads)"
            else:  # counted from 0, as every layer, block and head
                label, what = f"CA {layer - S}", "class attention (only the CLS queries)"
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
        numbers = super().image_numbers(session)
        words = ViewWords(query_none="CLS token (class-attention layers)")
        rows = self.layer_rows(session.analysis)
        return dataclasses.replace(numbers, attention=None, words=words, layer_rows=rows)

    def query_maps(self, session: Session, query: tuple[int, int] | None) -> QueryMaps:
        """The ViT's maps, NaN (blank) in the layers where the query has no row: the CLS in a
        self-attention layer, a patch in a class-attention layer."""
        import numpy as np

        from vitviz.imaging.colormaps import nice_levels

        maps = super().query_maps(session, query)
        blank = _rows_without(session.analysis, query)
        head, mean = maps.head_maps.copy(), maps.mean_maps.copy()
        prefix = maps.prefix_attention.copy()
        head[blank], mean[blank], prefix[blank] = np.nan, np.nan, np.nan
        finite = head[np.isfinite(head)]  # none: the query has no row in any layer (an XCiT's)
        S, _ = _self_depth(session.analysis)
        layers = session.analysis.layer_indices
        prefix[[row for row, layer in enumerate(layers) if layer < S]] = np.nan  # no CLS there
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
        """The CLS's maps of every layer and head (``<stem>_heads.png``), the self-attention
        rows blank (the CLS is not there)."""
        import numpy as np

        from vitviz.pipeline.export import heads_figure

        maps = analysis.all_attention_maps(None).numpy().copy()
        maps[_rows_without(analysis, None)] = np.nan
        return heads_figure(
            maps,
            maps.mean(axis=1),
            analysis,
            row_names=[r.label for r in self.layer_rows(analysis)],
            title="Attention of every layer and head",
            query="query CLS (class-attention layers; self-attention rows blank)",
            colormap=colormap,
            titled=titled,
        )

    def view_heads_picture(
        self,
        session: Session,
        query: tuple[int, int] | None,
        colormap: str,
        opacity: float,
        per_head: bool,
    ) -> Image.Image:
        """The window's head grid as it shows it (blank rows included), titled."""
        from vitviz.pipeline.export import heads_figure

        shown = self.query_maps(session, query)
        rows = "class-attention" if query is None else "self-attention"
        words = "query CLS" if query is None else f"query patch ({query[0]}, {query[1]})"
        return heads_figure(
            shown.head_maps,
            shown.mean_maps,
            session.analysis,
            row_names=[r.label for r in self.layer_rows(session.analysis)],
            title="Attention of every layer and head",
            query=f"{words} ({rows} layers; the other rows blank)",
            colormap=colormap,
            opacity=opacity,
            per_head=per_head,
        )

    def npz_arrays(self, analysis: Analysis) -> dict[str, np.ndarray]:
        import numpy as np

        S, _ = _self_depth(analysis)
        out = super().npz_arrays(analysis)
        out["class_attention_layers"] = np.array(
            [layer >= S for layer in analysis.layer_indices], dtype=bool
        )
        return out


KIND = CaitKind()
