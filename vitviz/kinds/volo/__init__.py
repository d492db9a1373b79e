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

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from vitviz.kindapi.protocol import LayerGrid, LayerRow, TokenGeometry
from vitviz.kinds.staged import StagedKind

if TYPE_CHECKING:
    import numpy as np
    from torch import Tensor, nn

    from vitviz.kindapi.feature_sites import LayerChoice
    from vitviz.kindapi.intermediates import HeadReplacement, Intermediates, Readout
    from vitviz.kindapi.protocol import ImageInput, Loaded, ViewWords
    from vitviz.kinds.volo.analysis import VOLOAnalysis
    from vitviz.kinds.volo.config import VOLOConfig


class VOLOKind(StagedKind):
    """vitviz's VOLONet."""

    ENGINE_DATA = "vitviz.kinds.volo.engine_data"  # its query maps (StagedKind)
    METHODS_MODULE = "vitviz.kinds.volo.methods"
    OWNER = "a VOLO"
    name = "volo"
    label = "VOLO (outlook attention)"
    POOL_QUERY = "query: every cell's row (class blocks: CLS)"
    POOL_SOURCE = "every cell's row"
    HEADS_TITLE = "Attention of every layer and head, each on its grid"

    def architecture(self, model: nn.Module) -> str:
        cfg = model.config
        aux = ", aux head" if cfg.aux_head else ""
        return (
            f"VOLO, widths {cfg.dims[0]}/{cfg.dims[1]}, depths "
            f"{'-'.join(map(str, cfg.depths))}+{cfg.class_blocks}, heads "
            f"{'-'.join(map(str, cfg.heads))}, patch {cfg.patch_size}{aux}"
        )

    def parts(self, model: nn.Module) -> tuple[str, ...]:
        from vitviz.kinds.volo.families import volo_parts

        return volo_parts(model.config)

    @property
    def families(self) -> Sequence[Any]:
        from vitviz.kinds.volo.families import FAMILY

        return (FAMILY,)

    def config_from_dict(self, data: dict[str, object]) -> VOLOConfig:
        from vitviz.kinds.volo.config import VOLOConfig

        return VOLOConfig.from_dict(data)

    def build_from_state(self, config: VOLOConfig, state: Mapping[str, Tensor]) -> nn.Module:
        import torch

        from vitviz.checkpoints.assign import assign_exactly
        from vitviz.kinds.volo.network import VOLONet

        with torch.device("meta"):
            model = VOLONet(config)
        return assign_exactly(model, state, "VOLO model")

    def library_outputs(self, model: nn.Module, x: Tensor) -> tuple[Tensor, list[Tensor]]:
        out = model.forward_explained(x)
        return out.logits, out.attentions  # in timm's order: outlookers, blocks, class blocks

    def analyze(self, loaded: Loaded, image: ImageInput, **options: Any) -> VOLOAnalysis:
        from vitviz.kinds.volo.analysis import analyze_volo

        model = getattr(loaded, "model", loaded)
        gradients = bool(options.get("gradients")) and int(model.config.num_classes) > 0
        target = options.get("target_class")
        return self.keeping_blocks(loaded, lambda: analyze_volo(loaded, image, gradients, target))

    def cam_blocks(self, model: nn.Module) -> Sequence[nn.Module]:
        """The outlookers and transformer blocks (the accessor's ``blocks``)."""
        from vitviz.kinds.volo.network import VOLONet

        if not isinstance(model, VOLONet):
            raise ValueError(f"vitviz can't take a {type(model).__name__} apart into its blocks")
        return model.blocks

    def staged_sites(self, model: nn.Module, x: Tensor) -> Any:
        from vitviz.kinds.volo.intermediates import VOLOSites
        from vitviz.kinds.volo.network import VOLONet

        return VOLOSites(model) if isinstance(model, VOLONet) else None

    def token_geometry(self, analysis: VOLOAnalysis) -> TokenGeometry:
        layers = tuple(
            LayerGrid(
                grid=tuple(analysis.stage_grids[s]),
                token_pixels=analysis.stage_pixels[s],
                num_prefix_tokens=1 if how == "class" else 0,
            )
            for s, how in zip(analysis.block_stages, analysis.layer_kinds, strict=True)
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
        """Grid blocks on their grids, every layer's heads before its projection (DESIGN §3)."""
        from vitviz.kinds.volo.intermediates import volo_intermediates

        return volo_intermediates(model, x, replace, logits_only)

    def readout(self, model: nn.Module) -> Readout:
        """The final norm (DESIGN §5's f); no logit lens: the head reads the CLS the class
        blocks make, which no grid block has."""
        from vitviz.kindapi.intermediates import Readout

        def logits(prefix: Tensor, patches: Tensor) -> Tensor:
            raise ValueError(
                "a VOLO's head reads the CLS its class blocks make from the last block's "
                "tokens; no grid block has one, so it has no logit lens"
            )

        return Readout(model.norm, logits, int(model.config.dims[-1]))

    def tokens_on_grid(
        self, model: nn.Module, x: Tensor, layer: LayerChoice
    ) -> Callable[[Tensor, tuple[int, int]], Tensor]:
        from vitviz.kinds.volo.intermediates import volo_tokens_on_grid

        return volo_tokens_on_grid(model, x, layer)

    def head_statistics(self, analysis: VOLOAnalysis) -> dict[str, np.ndarray]:
        from vitviz.kinds.volo.stats import head_statistics

        return head_statistics(analysis)

    def npz_arrays(self, analysis: VOLOAnalysis) -> dict[str, np.ndarray]:
        from vitviz.kinds.volo.export import volo_arrays

        return volo_arrays(analysis)

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
