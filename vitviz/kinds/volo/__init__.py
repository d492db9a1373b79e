"""The VOLO kind (Vision Outlooker, Yuan et al. 2021; timm's ``volo_*``): a conv stem, outlook
attention on a fine grid (each cell's output folded from the k × k windows around it, each
window's weights made by a Linear from its pooled centre), a downsample, transformer blocks on
the half grid, then a CLS through class-attention blocks; the logits are head(CLS) + 0.5 · the
aux head's maximum over the patch tokens.

Its attention layers are the head grid's rows in the order the network runs them: the
outlookers ("0.j"), the transformer blocks ("s.j", s ≥ 1), the class blocks ("cls.j").
``KIND`` is what ``vitviz.kinds`` registers; vitviz does not train one (``training`` is None).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from vitviz.kinds.staged import StagedKind

if TYPE_CHECKING:
    from torch import nn

    from vitviz.kindapi.intermediates import Readout
    from vitviz.kindapi.protocol import LayerRow, ViewWords
    from vitviz.kinds.volo.analysis import VOLOAnalysis


class VOLOKind(StagedKind):
    """vitviz's VOLONet."""

    ENGINE_DATA = "vitviz.kinds.volo.engine_data"  # its query maps (StagedKind)
    METHODS_MODULE = "vitviz.kinds.volo.methods"
    CONFIG = "vitviz.kinds.volo.config:VOLOConfig"
    NETWORK = "vitviz.kinds.volo.network:VOLONet"
    FAMILIES = ("vitviz.kinds.volo.families:FAMILY",)
    PARTS = "vitviz.kinds.volo.families:volo_parts"
    ANALYZE = "vitviz.kinds.volo.analysis:analyze_volo"
    SITES = "vitviz.kinds.volo.intermediates:VOLOSites"
    # grid blocks on their grids, every layer's heads before its projection (DESIGN §3)
    INTERMEDIATES = "vitviz.kinds.volo.intermediates:volo_intermediates"
    TOKENS_ON_GRID = "vitviz.kinds.volo.intermediates:volo_tokens_on_grid"
    HEAD_STATISTICS = "vitviz.kinds.volo.stats:head_statistics"
    NPZ_ARRAYS = "vitviz.kinds.volo.export:volo_arrays"
    OWNER = "a VOLO"
    name = "volo"
    label = "VOLO (outlook attention)"
    POOL_QUERY = "query: every cell's row (class blocks: CLS)"
    POOL_SOURCE = "every cell's row"
    HEADS_TITLE = "Attention of every layer and head, each on its grid"

    def input_stride(self, model: nn.Module) -> int:
        """The downsampled tokens' side (two patches), its analysis' input multiple."""
        cfg = model.config
        return int(2 * cfg.patch_size)

    def architecture(self, model: nn.Module) -> str:
        cfg = model.config
        aux = ", aux head" if cfg.aux_head else ""
        return (
            f"VOLO, widths {cfg.dims[0]}/{cfg.dims[1]}, depths "
            f"{'-'.join(map(str, cfg.depths))}+{cfg.class_blocks}, heads "
            f"{'-'.join(map(str, cfg.heads))}, patch {cfg.patch_size}{aux}"
        )

    def cam_blocks(self, model: nn.Module) -> Sequence[nn.Module]:
        """The outlookers and transformer blocks (the accessor's ``blocks``)."""
        return self.own_network(model).blocks

    def layer_prefix(self, analysis: VOLOAnalysis, layer: int) -> int:
        """A class block's CLS."""
        return 1 if analysis.layer_kinds[layer] == "class" else 0

    def readout(self, model: nn.Module) -> Readout:
        """The final norm (DESIGN §5's f); no logit lens: the head reads the CLS the class
        blocks make, which no grid block has."""
        from vitviz.kinds.readouts import readout_without_lens

        why = (
            "a VOLO's head reads the CLS its class blocks make from the last block's "
            "tokens; no grid block has one, so it has no logit lens"
        )
        return readout_without_lens(model.norm, int(model.config.dims[-1]), why)

    def layer_rows(self, analysis: VOLOAnalysis) -> tuple[LayerRow, ...]:
        rows = []
        for i, name in enumerate(analysis.layer_names):
            H, W = analysis.stage_grids[analysis.block_stages[i]]
            how = analysis.layer_kinds[i]
            if how == "outlook":
                tip = (
                    f"outlooker {name}: each of the {H}×{W} cells' row of the folded 3 × 3 "
                    "window weights over the cells it reads"
                )
                title = f"outlook {name} ({H}×{W}, folded window rows)"
            elif how == "class":
                tip = f"class block {name}: the CLS attends over itself and {H}×{W} patches"
                title = f"class block {name} (CLS over {H}×{W})"
            else:
                tip = f"block {name}: {H}×{W} patches attend to each other"
                title = f"block {name} ({H}×{W} patches)"
            heads = int(analysis.attentions[i].shape[0])
            rows.append(self.named_row(name, heads, tip, title, "layer"))
        return tuple(rows)

    # -- engine and window ---------------------------------------------------------------------
    def view_words(self, analysis: Any) -> ViewWords:
        """Layers ("0.1", "cls.0"), points of the input; without a clicked cell every cell's
        row (a class block's CLS row)."""
        from dataclasses import replace

        h0, w0 = analysis.stage_grids[0]
        return replace(
            super().view_words(analysis),
            layer="layer",
            axis="layer (stage.block, cls.block)",
            query_none="every cell's row (class blocks: the CLS)",
            method_query_none=f"from every cell · over stage 0's {h0}×{w0} tokens",
            method_query=f"from the clicked point · over stage 0's {h0}×{w0} tokens",
        )


KIND = VOLOKind()
