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
    from vitviz.kinds.mobilevit.analysis import MobileViTAnalysis
    from vitviz.kinds.mobilevit.config import MobileViTConfig


class MobileViTKind(StagedKind):
    """vitviz's MobileViTNet."""

    ENGINE_DATA = "vitviz.kinds.mobilevit.engine_data"  # its query maps and words (StagedKind)
    METHODS_MODULE = "vitviz.kinds.mobilevit.methods"
    OWNER = "a MobileViT"
    name = "mobilevit"
    label = "MobileViT"
    POOL_QUERY = "query: mean of every offset's rows"
    POOL_SOURCE = "the mean row"
    HEADS_TITLE = "Attention of every transformer layer and head: a pixel offset's patches"

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

    def parts(self, model: nn.Module) -> tuple[str, ...]:
        from vitviz.kinds.mobilevit.families import mobilevit_parts

        return mobilevit_parts(model.config)

    @property
    def families(self) -> Sequence[Any]:
        from vitviz.kinds.mobilevit import families, hf_family

        return (families.FAMILY, hf_family.FAMILY)

    def config_from_dict(self, data: dict[str, object]) -> MobileViTConfig:
        from vitviz.kinds.mobilevit.config import MobileViTConfig

        return MobileViTConfig.from_dict(data)

    def build_from_state(self, config: MobileViTConfig, state: Mapping[str, Tensor]) -> nn.Module:
        import torch

        from vitviz.checkpoints.assign import assign_exactly
        from vitviz.kinds.mobilevit.network import MobileViTNet

        with torch.device("meta"):
            model = MobileViTNet(config)
        return assign_exactly(model, state, "MobileViT model")

    def library_outputs(self, model: nn.Module, x: Tensor) -> tuple[Tensor, list[Tensor]]:
        out = model.forward_explained(x, capture_attention=True)
        return out.logits, out.attentions  # (B·P, heads, N, N), as the libraries' layers

    def parameter_bounds(self, subject: Any) -> tuple[int, int]:
        """A model's transformer layers and most heads; an analysis's kept layers and heads."""
        from torch import nn

        if isinstance(subject, nn.Module):
            return int(subject.config.depth), max(subject.config.layer_heads)
        return super().parameter_bounds(subject)

    def analyze(self, loaded: Loaded, image: ImageInput, **options: Any) -> MobileViTAnalysis:
        from vitviz.kinds.mobilevit.analysis import analyze_mobilevit

        target = options.get("target_class")
        return self.keeping_blocks(loaded, lambda: analyze_mobilevit(loaded, image, False, target))

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

    def intermediates(
        self,
        model: nn.Module,
        x: Tensor,
        *,
        replace: HeadReplacement | None = None,
        logits_only: bool = False,
    ) -> Intermediates:
        """Layers on their stage's pixel grid, heads before the projection (DESIGN §3)."""
        from vitviz.kinds.mobilevit.intermediates import mobilevit_intermediates

        return mobilevit_intermediates(model, x, replace, logits_only)

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

    def tokens_on_grid(
        self, model: nn.Module, x: Tensor, layer: LayerChoice
    ) -> Callable[[Tensor, tuple[int, int]], Tensor]:
        from vitviz.kinds.mobilevit.intermediates import mobilevit_tokens_on_grid

        return mobilevit_tokens_on_grid(model, x, layer)

    def head_statistics(self, analysis: MobileViTAnalysis) -> dict[str, np.ndarray]:
        from vitviz.kinds.mobilevit.stats import head_statistics

        return head_statistics(analysis)

    def npz_arrays(self, analysis: MobileViTAnalysis) -> dict[str, np.ndarray]:
        from vitviz.kinds.mobilevit.export import mobilevit_arrays

        return mobilevit_arrays(analysis)

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
            rows.append(
                LayerRow(
                    name,
                    int(attn.shape[0]),
                    tooltip=f"layer {name}: {H}×{W} pixels in {p}×{p} patches; each pixel "
                    f"attends over its offset in the {nh}×{nw} patches",
                    name=name,
                    title=f"layer {name} ({nh}×{nw} patches)",
                    hover=f"layer {name}",
                    selector=f" · {name}",
                )
            )
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
