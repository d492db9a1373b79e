"""The Swin Transformer kind: shifted-window attention over a pyramid of token grids.

``KIND`` is what ``vitviz.kinds`` registers; the network, its checkpoint families, its analysis
and its versions of the table's methods are the modules beside this one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from vitviz.kinds.protocol import LayerGrid, LayerRow, MethodImplementation, TokenGeometry
from vitviz.kinds.sides import ModelCodeSide, TrainingSide
from vitviz.kinds.swin import code_side, training

if TYPE_CHECKING:  # torch-free at import: the registry is read before torch loads
    from torch import Tensor, nn

    from vitviz.kinds.swin.analysis import SwinAnalysis
    from vitviz.kinds.swin.config import SwinConfig


class SwinKind:
    """vitviz's SwinTransformer and any captured model whose ``model_kind`` is "swin"."""

    name = "swin"
    label = "Swin Transformer"

    def owns(self, model: nn.Module) -> bool:
        return getattr(model, "model_kind", None) == self.name

    @property
    def families(self) -> Sequence[Any]:
        from vitviz.kinds.swin.families import huggingface, timm, torchvision

        return (torchvision.FAMILY, timm.FAMILY, huggingface.FAMILY)

    # -- loading, model code and training (helper "loading") ---------------------------------
    def config_from_dict(self, data: dict[str, object]) -> SwinConfig:
        from vitviz.kinds.swin.config import SwinConfig

        return SwinConfig.from_dict(data)

    def build_from_state(self, config: SwinConfig, state: Mapping[str, Tensor]) -> nn.Module:
        from vitviz.kinds.swin.families.common import build_swin

        return build_swin(config, state)

    def library_outputs(self, model: nn.Module, x: Tensor) -> tuple[Tensor, None]:
        return model(x), None  # its windows' maps aren't the library's: the logits only

    @property
    def model_code(self) -> ModelCodeSide:
        return code_side.SIDE

    @property
    def training(self) -> TrainingSide:
        return training.SIDE

    def analyze(self, loaded: Any, image: Any, **options: Any) -> SwinAnalysis:
        from vitviz.kinds.swin.analysis import analyze_swin

        return analyze_swin(loaded, image, **options)

    def token_geometry(self, analysis: SwinAnalysis) -> TokenGeometry:
        from vitviz.kinds.swin.attention import window_ids

        h0, w0 = analysis.stage_grids[0]
        patch = analysis.patch_size
        layers = tuple(
            LayerGrid(
                grid=tuple(layout.grid),
                token_pixels=patch * 2**stage,
                windows=window_ids(layout).numpy().astype("int32"),
            )
            for layout, stage in zip(analysis.layouts, analysis.block_stages, strict=True)
        )
        size = tuple(int(v) for v in analysis.input.shape[-2:])
        return TokenGeometry(input_size=size, grid=(h0, w0), cell_pixels=patch, layers=layers)

    def implementation(self, method: str) -> MethodImplementation | None:
        from vitviz.kinds.swin.methods import implementation

        return implementation(method)

    def layer_rows(self, analysis: SwinAnalysis) -> tuple[LayerRow, ...]:
        rows, counts = [], {}
        for attn, layout, stage in zip(
            analysis.attentions, analysis.layouts, analysis.block_stages, strict=True
        ):
            index = counts.get(stage, 0)
            counts[stage] = index + 1
            kind = "SW" if layout.shifted else "W"
            rows.append(LayerRow(f"{stage + 1}.{index + 1} {kind}", int(attn.shape[1])))
        return tuple(rows)


KIND = SwinKind()
