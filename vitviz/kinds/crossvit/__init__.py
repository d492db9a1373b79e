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

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from vitviz.kindapi.protocol import LayerGrid, LayerRow, TokenGeometry
from vitviz.kinds.staged import StagedKind

if TYPE_CHECKING:
    import numpy as np
    from torch import Tensor, nn

    from vitviz.kindapi.feature_sites import LayerChoice
    from vitviz.kindapi.intermediates import HeadReplacement, Intermediates, Readout
    from vitviz.kindapi.protocol import (
        ImageInput,
        Loaded,
        ViewWords,
    )
    from vitviz.kinds.crossvit.analysis import CrossViTAnalysis
    from vitviz.kinds.crossvit.config import CrossViTConfig

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
    OWNER = "a CrossViT"
    name = "crossvit"
    label = "CrossViT (two-branch cross-attention ViT)"
    POOL_QUERY = "query: CLS token"
    POOL_SOURCE = "the CLS token"
    HEADS_TITLE = "Attention of every layer and head, each on its branch's grid"

    def architecture(self, model: nn.Module) -> str:
        cfg = model.config
        stem = ", conv stem (dagger)" if cfg.multi_conv else ""
        return (
            f"CrossViT, widths {cfg.dims[0]}/{cfg.dims[1]}, heads {cfg.heads[0]}/{cfg.heads[1]}, "
            f"patches {cfg.patch_sizes[0]}/{cfg.patch_sizes[1]}, {len(cfg.block_depths)} "
            f"multi-scale blocks{stem}"
        )

    def parts(self, model: nn.Module) -> tuple[str, ...]:
        from vitviz.kinds.crossvit.families import crossvit_parts

        return crossvit_parts(model.config)

    @property
    def families(self) -> Sequence[Any]:
        from vitviz.kinds.crossvit.families import FAMILY

        return (FAMILY,)

    def config_from_dict(self, data: dict[str, object]) -> CrossViTConfig:
        from vitviz.kinds.crossvit.config import CrossViTConfig

        return CrossViTConfig.from_dict(data)

    def build_from_state(self, config: CrossViTConfig, state: Mapping[str, Tensor]) -> nn.Module:
        import torch

        from vitviz.checkpoints.assign import assign_exactly
        from vitviz.kinds.crossvit.network import CrossViTNet

        with torch.device("meta"):
            model = CrossViTNet(config)
        return assign_exactly(model, state, "CrossViT model")

    def library_outputs(self, model: nn.Module, x: Tensor) -> tuple[Tensor, list[Tensor]]:
        out = model.forward_explained(x)
        return out.logits, out.attentions  # in timm's order of its blocks and fusions

    def analyze(self, loaded: Loaded, image: ImageInput, **options: Any) -> CrossViTAnalysis:
        from vitviz.kinds.crossvit.analysis import analyze_crossvit

        model = getattr(loaded, "model", loaded)
        gradients = bool(options.get("gradients")) and int(model.config.num_classes) > 0
        target = options.get("target_class")
        return self.keeping_blocks(
            loaded, lambda: analyze_crossvit(loaded, image, gradients, target)
        )

    def cam_blocks(self, model: nn.Module) -> Sequence[nn.Module]:
        """The ViT blocks of both branches, in the order they run (the accessor's ``blocks``)."""
        from vitviz.kinds.crossvit.network import CrossViTNet

        if not isinstance(model, CrossViTNet):
            raise ValueError(f"vitviz can't take a {type(model).__name__} apart into its blocks")
        return [block for _b, block in model.self_blocks()]

    def staged_sites(self, model: nn.Module, x: Tensor) -> Any:
        from vitviz.kinds.crossvit.intermediates import CrossViTSites
        from vitviz.kinds.crossvit.network import CrossViTNet

        return CrossViTSites(model) if isinstance(model, CrossViTNet) else None

    def kept_with_prefix(self, sites: Any, kept: Any) -> Any:
        """The CLS each ViT block carried, as the accessor gives it."""
        import dataclasses

        prefixes = tuple(p.detach() for p in sites.prefixes if p is not None)
        if len(prefixes) != len(kept.blocks):
            return None
        return dataclasses.replace(kept, block_prefix=prefixes)

    def token_geometry(self, analysis: CrossViTAnalysis) -> TokenGeometry:
        layers = tuple(
            LayerGrid(
                grid=tuple(analysis.stage_grids[b]),
                token_pixels=analysis.stage_pixels[b],  # type: ignore[arg-type]
                num_prefix_tokens=1,
            )
            for b in analysis.block_stages
        )
        size = tuple(int(v) for v in analysis.input.shape[-2:])
        return TokenGeometry(
            input_size=size,
            grid=tuple(analysis.stage_grids[0]),
            cell_pixels=int(analysis.stage_pixels[0]),
            layers=layers,
        )

    def intermediates(
        self,
        model: nn.Module,
        x: Tensor,
        *,
        replace: HeadReplacement | None = None,
        logits_only: bool = False,
    ) -> Intermediates:
        """ViT blocks on their branch's grid with their CLS, every layer's heads before its
        projection (DESIGN §3)."""
        from vitviz.kinds.crossvit.intermediates import crossvit_intermediates

        return crossvit_intermediates(model, x, replace, logits_only)

    def readout(self, model: nn.Module) -> Readout:
        """Branch 1's final norm (the last block's, DESIGN §5's f); no logit lens: the
        prediction is the mean of both branches' heads, a block's tokens are one branch's."""
        from vitviz.kindapi.intermediates import Readout

        def logits(prefix: Tensor, patches: Tensor) -> Tensor:
            raise ValueError(
                "a CrossViT's prediction is the mean of both branches' heads; one block's "
                "tokens are one branch's, so it has no logit lens"
            )

        return Readout(model.norm[1], logits, int(model.config.dims[1]))

    def tokens_on_grid(
        self, model: nn.Module, x: Tensor, layer: LayerChoice
    ) -> Callable[[Tensor, tuple[int, int]], Tensor]:
        from vitviz.kinds.crossvit.intermediates import crossvit_tokens_on_grid

        return crossvit_tokens_on_grid(model, x, layer)

    def head_statistics(self, analysis: CrossViTAnalysis) -> dict[str, np.ndarray]:
        from vitviz.kinds.crossvit.stats import head_statistics

        return head_statistics(analysis)

    def npz_arrays(self, analysis: CrossViTAnalysis) -> dict[str, np.ndarray]:
        from vitviz.kinds.crossvit.export import crossvit_arrays

        return crossvit_arrays(analysis)

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
            rows.append(
                LayerRow(
                    name,
                    int(analysis.attentions[i].shape[0]),
                    tooltip=tip,
                    name=name,
                    title=title,
                    hover=f"layer {name}",
                    selector=f" · {name}",
                )
            )
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
