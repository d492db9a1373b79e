"""The MViTv2 kind (Multiscale Vision Transformer v2, Li et al. 2022; timm's ``mvitv2_*``):
stages of pooled attention, each block's queries on its stage's grid attending over keys and
values pooled to a coarser key grid, a decomposed relative position bias, residual pooling, and
(the ``_cls`` forms) a CLS token through every block.

``KIND`` is what ``vitviz.kinds`` registers; the network, its checkpoint family, its analysis
and its versions of the table's methods are the modules beside this one. vitviz does not train
one (``training`` is None: the Training tab does not offer it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vitviz.kinds.staged import StagedKind, overlay_stretched

if TYPE_CHECKING:
    import numpy as np
    from torch import Tensor, nn

    from vitviz.kindapi.intermediates import Readout
    from vitviz.kindapi.protocol import ImageInput, LayerRow, Loaded, ViewWords
    from vitviz.kinds.mvit.analysis import MViTAnalysis


class MViTKind(StagedKind):
    """vitviz's MViT."""

    ENGINE_DATA = "vitviz.kinds.mvit.engine_data"  # its query maps and words (StagedKind)
    METHODS_MODULE = "vitviz.kinds.mvit.methods"
    CONFIG = "vitviz.kinds.mvit.config:MViTConfig"
    NETWORK = "vitviz.kinds.mvit.network:MViT"
    FAMILIES = ("vitviz.kinds.mvit.families:FAMILY",)
    PARTS = "vitviz.kinds.mvit.families:mvit_parts"
    SITES = "vitviz.kinds.mvit.intermediates:MViTSites"
    # blocks on their query grids with the CLS, heads before the projection with residual
    # pooling added (DESIGN §3, §5); a block's tokens on its grid, the CLS left out
    INTERMEDIATES = "vitviz.kinds.mvit.intermediates:mvit_intermediates"
    TOKENS_ON_GRID = "vitviz.kinds.mvit.intermediates:mvit_tokens_on_grid"
    HEAD_STATISTICS = "vitviz.kinds.mvit.stats:head_statistics"
    NPZ_ARRAYS = "vitviz.kinds.mvit.export:mvit_arrays"
    OWNER = "an MViTv2"
    name = "mvit"
    label = "MViTv2 (multiscale ViT)"
    POOL_QUERY = "query: CLS token, or the mean of every query"
    POOL_SOURCE = "the CLS token"
    HEADS_TITLE = "Attention of every block and head, each over its pooled key grid"

    def architecture(self, model: nn.Module) -> str:
        cfg = model.config
        cls = ", CLS token" if cfg.use_cls_token else ""
        return (
            f"MViTv2, widths {'-'.join(map(str, cfg.dims))}, depths "
            f"{'-'.join(map(str, cfg.depths))}, heads {'-'.join(map(str, cfg.heads))}{cls}"
        )

    def analyze(self, loaded: Loaded, image: ImageInput, **options: Any) -> MViTAnalysis:
        """No attention gradients: no method of the kind reads them."""
        from vitviz.kinds.mvit.analysis import analyze_mvit

        return self.keeping_blocks(loaded, lambda: analyze_mvit(loaded, image))

    def carries_prefix(self, sites: Any) -> bool:
        """The CLS token each block carried (a model with one)."""
        return bool(sites.prefix)

    def layer_prefix(self, analysis: MViTAnalysis, layer: int) -> int:
        return analysis.num_prefix_tokens

    def readout(self, model: nn.Module) -> Readout:
        """The final norm and the head on the mean of the patch tokens (or the CLS token), as
        the network reads its last block (DESIGN §5)."""
        import torch

        from vitviz.kindapi.intermediates import Readout

        P = int(model.config.num_prefix_tokens)
        width = int(model.config.blocks()[-1].dim_out)

        def logits(prefix: Tensor, patches: Tensor) -> Tensor:
            if prefix.shape[1] != P:
                raise ValueError(f"a block of this MViTv2 has {P} prefix tokens")
            return model.forward_head(torch.cat([prefix, patches], dim=1))

        return Readout(model.norm, logits, width)

    def layer_rows(self, analysis: MViTAnalysis) -> tuple[LayerRow, ...]:
        rows = []
        cls = " (and the CLS)" if analysis.num_prefix_tokens else ""
        names = self.block_names(analysis.block_stages)
        for b, (attn, s, name) in enumerate(
            zip(analysis.attentions, analysis.block_stages, names, strict=False)
        ):
            H, W = analysis.stage_grids[s]
            kh, kw = analysis.key_grids[b]
            tip = f"block {name}: {H}×{W} queries{cls} attend to {kh}×{kw} pooled keys{cls}"
            title = f"block {name} ({H}×{W} queries, {kh}×{kw} keys)"
            rows.append(self.named_row(name, int(attn.shape[0]), tip, title, "block"))
        return tuple(rows)

    def over_input(self, analysis: Any, values: np.ndarray, colormap: str, opacity: float) -> Any:
        """``values`` on any grid of the model (a stage's, a block's key grid) over the model
        input, each cell over its stride's square from the top left."""
        return overlay_stretched(analysis, values, colormap, opacity)

    # -- engine and window ---------------------------------------------------------------------
    def view_words(self, analysis: Any) -> ViewWords:
        """The staged kinds' words, the query without a clicked cell being the CLS token (or
        the mean of every query's row)."""
        from dataclasses import replace

        none = "CLS token" if analysis.num_prefix_tokens else "mean of every query"
        return replace(
            super().view_words(analysis), query_none=none, title_query_none=f"query: {none}"
        )


KIND = MViTKind()
