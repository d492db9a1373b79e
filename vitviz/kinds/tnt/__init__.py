"""The TNT kind (Transformer in Transformer, Han et al. 2021; timm's ``tnt_*``): each patch a
sub-grid of pixel tokens with an inner transformer of its own, whose projection is added to the
patch's token before an outer transformer over [CLS, patches], as a ViT's.

The window shows the outer attention on the patch grid, a row per block (DESIGN §5); the inner
attention (each patch's pixel tokens over each other) is checked against timm at load but not
drawn. ``KIND`` is what ``vitviz.kinds`` registers; the network, its checkpoint family, its
analysis and its versions of the table's methods are the modules beside this one. vitviz does
not train one (``training`` is None).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vitviz.kindapi.protocol import LayerRow
from vitviz.kinds.staged import StagedKind, overlay_stretched

if TYPE_CHECKING:
    import numpy as np
    from torch import Tensor, nn

    from vitviz.kindapi.feature_sites import LayerChoice
    from vitviz.kindapi.intermediates import Readout
    from vitviz.kindapi.protocol import ImageInput, Loaded, ViewWords
    from vitviz.kinds.tnt.analysis import TNTAnalysis


class TNTKind(StagedKind):
    """vitviz's TNT: one stage, its outer attention a ViT's over [CLS, patches]."""

    ENGINE_DATA = "vitviz.kinds.tnt.engine_data"  # its query maps and words (StagedKind)
    METHODS_MODULE = "vitviz.kinds.tnt.methods"
    CONFIG = "vitviz.kinds.tnt.config:TNTConfig"
    NETWORK = "vitviz.kinds.tnt.network:TNT"
    FAMILIES = ("vitviz.kinds.tnt.families:FAMILY",)
    PARTS = "vitviz.kinds.tnt.families:tnt_parts"
    SITES = "vitviz.kinds.tnt.intermediates:TNTSites"
    # blocks on the patch grid with the CLS, the outer heads before the outer attention's
    # projection (DESIGN §3, §5); a block's patch tokens on the patch grid, the CLS left out
    INTERMEDIATES = "vitviz.kinds.tnt.intermediates:tnt_intermediates"
    TOKENS_ON_GRID = "vitviz.kinds.tnt.intermediates:tnt_tokens_on_grid"
    HEAD_STATISTICS = "vitviz.kinds.tnt.stats:head_statistics"
    NPZ_ARRAYS = "vitviz.kinds.tnt.export:tnt_arrays"
    OWNER = "a TNT"
    name = "tnt"
    label = "TNT (Transformer in Transformer)"
    POOL_QUERY = "query: CLS token"
    POOL_SOURCE = "the CLS token"
    HEADS_TITLE = "Outer attention of every block and head over the patch grid"

    def architecture(self, model: nn.Module) -> str:
        cfg = model.config
        legacy = ", legacy layout" if cfg.legacy else ""
        return (
            f"TNT, {cfg.depths[0]} blocks, outer width {cfg.embed_dim} ({cfg.heads[0]} heads), "
            f"inner width {cfg.inner_dim} ({cfg.inner_heads} heads), patch {cfg.patch_size}"
            f"{legacy}"
        )

    def library_outputs(self, model: nn.Module, x: Tensor) -> tuple[Tensor, list[Tensor]]:
        """Logits and each block's inner then outer probabilities, as timm's softmaxes run."""
        out = model.forward_explained(x)
        pairs = [a for inner, outer in zip(out.inner, out.attentions, strict=True)
                 for a in (inner, outer)]  # fmt: skip
        return out.logits, pairs

    def analyze(self, loaded: Loaded, image: ImageInput, **options: Any) -> TNTAnalysis:
        from vitviz.kinds.tnt.analysis import analyze_tnt

        return self.keeping_blocks(loaded, lambda: analyze_tnt(loaded, image))

    def carries_prefix(self, sites: Any) -> bool:
        """The CLS token each block carried."""
        return True

    def layer_prefix(self, analysis: TNTAnalysis, layer: int) -> int:
        """The CLS before every block's patch grid."""
        return 1

    def readout(self, model: nn.Module) -> Readout:
        """The final norm and the head on the CLS token (or the mean of the patches), as the
        network reads its last block (DESIGN §5)."""
        import torch

        from vitviz.kindapi.intermediates import Readout

        def logits(prefix: Tensor, patches: Tensor) -> Tensor:
            if prefix.shape[1] != 1:
                raise ValueError("a block of this TNT has 1 prefix token (the CLS)")
            return model.forward_head(torch.cat([prefix, patches], dim=1))

        return Readout(model.norm, logits, int(model.config.embed_dim))

    def feature_site(self, model: nn.Module, x: Tensor, layer: LayerChoice) -> Any:
        """The CAM family's layer (DESIGN §5): a block's ``norm1`` (its outer attention's
        LayerNorm), ``norm2`` (its outer MLP's) or ``output``, whose token tensor is the
        second item of the block's output (the first: its pixel tokens)."""
        import dataclasses

        site = super().feature_site(model, x, layer)
        if not isinstance(site.module, type(model.blocks[0])):
            return site
        return dataclasses.replace(
            site,
            tensor=lambda output: output[1],
            replace=lambda output, tokens: (output[0], tokens, *output[2:]),
        )

    def layer_rows(self, analysis: TNTAnalysis) -> tuple[LayerRow, ...]:
        h, w = analysis.stage_grids[0]
        n = "×".join(map(str, analysis.pixel_grid))
        L = len(analysis.attentions)
        return tuple(
            LayerRow(
                str(b),
                int(attn.shape[0]),
                tooltip=f"block {b}: outer attention of the CLS and {h}×{w} patches (each "
                f"patch's {n} pixel tokens' inner attention is not drawn)",
                name=str(b),
                title=f"block {b} of {L} (outer attention, {h}×{w} patches)",
                hover=f"block {b}",
                selector="",
            )
            for b, attn in enumerate(analysis.attentions)
        )

    def over_input(self, analysis: Any, values: np.ndarray, colormap: str, opacity: float) -> Any:
        """``values`` on the patch grid over the model input, each patch over its square."""
        return overlay_stretched(analysis, values, colormap, opacity)

    # -- engine and window ---------------------------------------------------------------------
    def view_words(self, analysis: Any) -> ViewWords:
        """A ViT's words: blocks numbered from 0, the query the CLS token or a patch."""
        from dataclasses import replace

        from vitviz.explain.methods import cam_methods

        h, w = analysis.stage_grids[0]
        return replace(
            super().view_words(analysis),
            axis="block",
            head="head {head}",
            query_none="CLS token",
            query_cell="patch row {row}, col {col} (#{index})",
            title_query_none="query: CLS token",
            title_query="query patch ({row}, {col})",
            method_query_none=f"from the CLS token · over the {h}×{w} patches",
            method_query=f"from patch ({{row}}, {{col}}) · over the {h}×{w} patches",
            method_fixed=dict.fromkeys(cam_methods(), f"a block's patch tokens, {h}×{w}"),
        )


KIND = TNTKind()
