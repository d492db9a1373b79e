"""The MobileViT kind (Mehta and Rastegari 2021; timm's ``mobilevit_xxs``, ``mobilevit_xs``,
``mobilevit_s``): MobileNetV2 inverted residual blocks and MobileViT blocks, whose transformer
layers run on the feature map unfolded into p × p patches: each pixel offset of a patch attends
over the same offset in every patch. No CLS token; the head reads the average pool of a final
1×1 conv.

``KIND`` is what ``vitviz.kinds`` registers; the network, its checkpoint family, its analysis
and its versions of the table's methods are the modules beside this one. vitviz does not train
one (``training`` is None: the Training tab does not offer it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vitviz.kindapi.protocol import LayerGrid, TokenGeometry
from vitviz.kinds.staged import StagedKind

if TYPE_CHECKING:
    from torch import Tensor, nn

    from vitviz.kindapi.intermediates import Readout
    from vitviz.kindapi.protocol import LayerRow, ViewWords
    from vitviz.kinds.mobilevit.analysis import MobileViTAnalysis


class MobileViTKind(StagedKind):
    """vitviz's MobileViTNet."""

    ENGINE_DATA = "vitviz.kinds.mobilevit.engine_data"  # its query maps and words (StagedKind)
    METHODS_MODULE = "vitviz.kinds.mobilevit.methods"
    CONFIG = "vitviz.kinds.mobilevit.config:MobileViTConfig"
    NETWORK = "vitviz.kinds.mobilevit.network:MobileViTNet"
    FAMILIES = (
        "vitviz.kinds.mobilevit.families:FAMILY",
        "vitviz.kinds.mobilevit.hf_family:FAMILY",
    )
    PARTS = "vitviz.kinds.mobilevit.families:mobilevit_parts"
    ANALYZE = "vitviz.kinds.mobilevit.analysis:analyze_mobilevit"
    ATTENTION_GRADIENTS = False  # no method of the kind reads them
    # layers on their stage's pixel grid, heads before the projection (DESIGN §3)
    INTERMEDIATES = "vitviz.kinds.mobilevit.intermediates:mobilevit_intermediates"
    TOKENS_ON_GRID = "vitviz.kinds.mobilevit.intermediates:mobilevit_tokens_on_grid"
    HEAD_STATISTICS = "vitviz.kinds.mobilevit.stats:head_statistics"
    NPZ_ARRAYS = "vitviz.kinds.mobilevit.export:mobilevit_arrays"
    OWNER = "a MobileViT"
    name = "mobilevit"
    label = "MobileViT"
    POOL_QUERY = "query: mean of every offset's rows"
    POOL_SOURCE = "the mean row"
    HEADS_TITLE = "Attention of every transformer layer and head: a pixel offset's patches"

    def input_stride(self, model: nn.Module) -> int:
        """The first attention stage's stride, what its analysis prepares inputs in multiples of."""
        cfg = model.config
        return int(cfg.stage_stride(cfg.attention_stages[0]))

    def architecture(self, model: nn.Module) -> str:
        cfg = model.config
        stages = cfg.attention_stages
        return (
            f"MobileViT, widths {'-'.join(map(str, cfg.dims))}, transformer widths "
            f"{'-'.join(str(cfg.transformer_dims[s]) for s in stages)}, layers "
            f"{'-'.join(str(cfg.depths[s]) for s in stages)}, heads "
            f"{'-'.join(str(cfg.heads[s]) for s in stages)}, {cfg.patch_size}×"
            f"{cfg.patch_size} patches"
        )

    def model_heads(self, config: Any) -> list[int]:
        """Each transformer layer's heads."""
        return config.layer_heads

    def staged_sites(self, model: nn.Module, x: Tensor) -> Any:
        """vitviz's MobileViTNet's layers as its accessor reads them (None: another network)."""
        from vitviz.kinds.mobilevit.intermediates import mobilevit_sites

        return mobilevit_sites(model, x)

    def token_geometry(self, analysis: MobileViTAnalysis) -> TokenGeometry:
        """Clickable: the first MobileViT block's feature pixels; each layer: its stage's
        patch grid (a cell: the patch, holding the row's weight on its pixel at the query's
        offset)."""
        a = analysis
        layers = tuple(
            LayerGrid(grid=tuple(a.patch_grids[s]), token_pixels=a.patch * a.stage_pixels[s])
            for s in a.block_stages
        )
        size = tuple(int(v) for v in a.input.shape[-2:])
        return TokenGeometry(
            input_size=size, grid=tuple(a.stage_grids[0]), cell_pixels=a.stage_pixels[0],
            layers=layers,
        )  # fmt: skip

    def readout(self, model: nn.Module) -> Readout:
        """None: a layer's tokens reach the head only through the block's fold, projection and
        fusion with the block's input and the convolutions after (DESIGN §5)."""
        raise ValueError(
            "vitviz can't read a MobileViT's transformer layers out through its head: the fold, "
            "the projection, the fusion with the block's input and the convolutions after stand "
            "between them"
        )

    def default_cam_part(self, model: nn.Module) -> str:
        """The CAM family reads the last transformer layer's output, folded onto its grid."""
        return "output"

    def layer_rows(self, analysis: MobileViTAnalysis) -> tuple[LayerRow, ...]:
        rows = []
        p = analysis.patch
        for attn, s, name in zip(
            analysis.attentions,
            analysis.block_stages,
            self.block_names(analysis.block_stages),
            strict=True,
        ):
            H, W = analysis.stage_grids[s]
            nh, nw = analysis.patch_grids[s]
            tip = (
                f"layer {name}: {H}×{W} pixels in {p}×{p} patches; each pixel attends over "
                f"its offset in the {nh}×{nw} patches"
            )
            title = f"layer {name} ({nh}×{nw} patches)"
            rows.append(self.named_row(name, int(attn.shape[0]), tip, title, "layer"))
        return tuple(rows)

    # -- engine and window ---------------------------------------------------------------------
    def view_words(self, analysis: Any) -> ViewWords:
        """The staged kinds' words, a row being a pixel offset's sequence of patches."""
        from dataclasses import replace

        words = super().view_words(analysis)
        return replace(
            words,
            layer="layer",
            axis="layer (block.layer)",
            query_none="mean of every pixel's row",
            title_query="query pixel in patch ({trow}, {tcol}): its offset in every patch",
        )


KIND = MobileViTKind()
