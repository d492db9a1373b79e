"""The CrossViT kind (Chen et al. 2021; timm's ``crossvit_*``): two branches of different patch
sizes over the same image, each with its CLS and its ViT blocks on its own grid, exchanging
their CLS tokens through cross-attention after each multi-scale block; the logits are the mean
of the two branches' heads.

Its attention layers are the head grid's rows in the order the network runs them: per
multi-scale block k, branch 0's blocks ("k.S0", ...), branch 1's ("k.L0", ...), then its two
cross-attention layers ("k.S×L": branch 0's CLS over branch 1's patches, "k.L×S"). ``KIND`` is
what ``vitviz.kinds`` registers; vitviz does not train one (``training`` is None).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from vitviz.kinds.staged import StagedKind

if TYPE_CHECKING:
    from torch import nn

    from vitviz.kindapi.intermediates import Readout
    from vitviz.kindapi.protocol import LayerRow, ViewWords
    from vitviz.kinds.crossvit.analysis import CrossViTAnalysis

BRANCH_LETTERS = ("S", "L")  # branch 0: the small patches, branch 1: the large


def layer_names(analysis: Any) -> list[str]:
    """ "k.S0", "k.L2" for a branch's blocks, "k.S×L" for branch 0's CLS over branch 1's
    patches (and "k.L×S"), k the multi-scale block."""
    names, counts = [], {}
    for k, how, owner in zip(
        analysis.layer_blocks, analysis.layer_kinds, analysis.layer_owners, strict=True
    ):
        me, other = BRANCH_LETTERS[owner], BRANCH_LETTERS[1 - owner]
        if how == "cross":
            names.append(f"{k}.{me}×{other}")
            continue
        j = counts.get((k, owner), 0)
        counts[(k, owner)] = j + 1
        names.append(f"{k}.{me}{j}")
    return names


class CrossViTKind(StagedKind):
    """vitviz's CrossViTNet."""

    ENGINE_DATA = "vitviz.kinds.crossvit.engine_data"  # its query maps (StagedKind)
    METHODS_MODULE = "vitviz.kinds.crossvit.methods"
    CONFIG = "vitviz.kinds.crossvit.config:CrossViTConfig"
    NETWORK = "vitviz.kinds.crossvit.network:CrossViTNet"
    FAMILIES = ("vitviz.kinds.crossvit.families:FAMILY",)
    PARTS = "vitviz.kinds.crossvit.families:crossvit_parts"
    ANALYZE = "vitviz.kinds.crossvit.analysis:analyze_crossvit"
    SITES = "vitviz.kinds.crossvit.intermediates:CrossViTSites"
    # ViT blocks on their branch's grid with their CLS, every layer's heads before its
    # projection (DESIGN §3)
    INTERMEDIATES = "vitviz.kinds.crossvit.intermediates:crossvit_intermediates"
    TOKENS_ON_GRID = "vitviz.kinds.crossvit.intermediates:crossvit_tokens_on_grid"
    HEAD_STATISTICS = "vitviz.kinds.crossvit.stats:head_statistics"
    NPZ_ARRAYS = "vitviz.kinds.crossvit.export:crossvit_arrays"
    OWNER = "a CrossViT"
    name = "crossvit"
    label = "CrossViT (two-branch cross-attention ViT)"
    POOL_QUERY = "query: CLS token"
    POOL_SOURCE = "the CLS token"
    HEADS_TITLE = "Attention of every layer and head, each on its branch's grid"

    def input_stride(self, model: nn.Module) -> int:
        """Branch 0's patch, what its analysis prepares inputs in multiples of."""
        cfg = model.config
        return int(cfg.patch_sizes[0])

    def architecture(self, model: nn.Module) -> str:
        cfg = model.config
        stem = ", conv stem (dagger)" if cfg.multi_conv else ""
        return (
            f"CrossViT, widths {cfg.dims[0]}/{cfg.dims[1]}, heads {cfg.heads[0]}/{cfg.heads[1]}, "
            f"patches {cfg.patch_sizes[0]}/{cfg.patch_sizes[1]}, {len(cfg.block_depths)} "
            f"multi-scale blocks{stem}"
        )

    def cam_blocks(self, model: nn.Module) -> Sequence[nn.Module]:
        """The ViT blocks of both branches, in the order they run (the accessor's ``blocks``)."""
        return [block for _b, block in self.own_network(model).self_blocks()]

    def carries_prefix(self, sites: Any) -> bool:
        """The CLS each ViT block carried."""
        return True

    def layer_prefix(self, analysis: CrossViTAnalysis, layer: int) -> int:
        return 1

    def readout(self, model: nn.Module) -> Readout:
        """Branch 1's final norm (the last block's, DESIGN §5's f); no logit lens: the
        prediction is the mean of both branches' heads, a block's tokens are one branch's."""
        from vitviz.kinds.readouts import readout_without_lens

        why = (
            "a CrossViT's prediction is the mean of both branches' heads; one block's "
            "tokens are one branch's, so it has no logit lens"
        )
        return readout_without_lens(model.norm[1], int(model.config.dims[1]), why)

    def layer_rows(self, analysis: CrossViTAnalysis) -> tuple[LayerRow, ...]:
        rows = []
        for i, name in enumerate(layer_names(analysis)):
            b = analysis.block_stages[i]
            H, W = analysis.stage_grids[b]
            owner = analysis.layer_owners[i]
            if analysis.layer_kinds[i] == "cross":
                tip = (
                    f"cross-attention {name}: branch {owner}'s CLS (projected) attends over "
                    f"branch {b}'s {H}×{W} patches"
                )
                title = f"layer {name} (branch {owner}'s CLS over branch {b}'s {H}×{W})"
            else:
                tip = f"block {name}: branch {b}'s CLS and {H}×{W} patches attend to each other"
                title = f"layer {name} (branch {b}: {H}×{W} patches + CLS)"
            heads = int(analysis.attentions[i].shape[0])
            rows.append(self.named_row(name, heads, tip, title, "layer"))
        return tuple(rows)

    # -- engine and window ---------------------------------------------------------------------
    def view_words(self, analysis: Any) -> ViewWords:
        """Layers ("0.S1", "0.S×L"), points of the input; without a clicked cell the CLS."""
        from dataclasses import replace

        h0, w0 = analysis.stage_grids[0]
        return replace(
            super().view_words(analysis),
            layer="layer",
            axis="layer (block.branch)",
            query_none="CLS token",
            method_query_none=f"from the CLS token · over branch 0's {h0}×{w0} tokens",
            method_query=f"from the clicked point · over branch 0's {h0}×{w0} tokens",
        )


KIND = CrossViTKind()
