"""The Swin Transformer kind: shifted-window attention over a pyramid of token grids.

``KIND`` is what ``vitviz.kinds`` registers; the network, its checkpoint families, its analysis
and its versions of the table's methods are the modules beside this one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from vitviz.kindapi.protocol import LayerGrid, LayerRow, TokenGeometry
from vitviz.kindapi.sides import ModelCodeSide, TrainingSide
from vitviz.kinds.staged import StagedKind
from vitviz.kinds.swin import code_side, training

if TYPE_CHECKING:  # torch-free at import: the registry is read before torch loads
    from pathlib import Path

    import numpy as np
    from PIL import Image
    from torch import Tensor, nn

    from vitviz.checkpoints import LoadedModel
    from vitviz.kindapi.feature_sites import LayerChoice
    from vitviz.kindapi.protocol import (
        FaithfulnessReport,
        ImageInput,
        Loaded,
        ModelShape,
        Session,
    )
    from vitviz.kinds.swin.analysis import SwinAnalysis
    from vitviz.kinds.swin.config import SwinConfig


class SwinKind(StagedKind):
    """vitviz's SwinTransformer and any captured model whose ``model_kind`` is "swin"."""

    ENGINE_DATA = "vitviz.kinds.swin.engine_data"  # its query maps and words (StagedKind)
    METHODS_MODULE = "vitviz.kinds.swin.methods"
    HEAD_AXIS = 1  # its kept attention: (windows, heads, n, n)
    CONFIG = "vitviz.kinds.swin.config:SwinConfig"
    NETWORK = "vitviz.kinds.swin.network:SwinTransformer"
    FAMILIES = tuple(
        f"vitviz.kinds.swin.families.{module}:FAMILY"
        for module in ("torchvision", "timm", "timm_cr", "huggingface")
    )
    SITES = "vitviz.kinds.swin.intermediates:SwinSites"
    # blocks on their grids, heads before the projection, windows un-shifted (DESIGN §3)
    INTERMEDIATES = "vitviz.kinds.swin.intermediates:swin_intermediates"
    HEAD_STATISTICS = "vitviz.kinds.swin.stats:padded_head_statistics"
    NPZ_ARRAYS = "vitviz.kinds.swin.export:swin_arrays"
    OWNER = "a Swin"
    HEADS_TITLE = "Window attention of every block and head"
    name = "swin"
    label = "Swin Transformer"

    def architecture(self, model: nn.Module) -> str:
        cfg = model.config.to_dict()
        v = cfg.get("version", 1)
        return (
            f"Swin{' V2' if v == 2 else ''}{'-CR' if cfg.get('cr') else ''}, "
            f"widths {'-'.join(map(str, cfg['dims']))}, "
            f"depths {'-'.join(map(str, cfg['depths']))}, "
            f"heads {'-'.join(map(str, cfg['heads']))}, "
            f"windows {'-'.join(map(str, cfg['window_sizes']))}"
        )

    def parts(self, model: nn.Module) -> tuple[str, ...]:
        version = getattr(model.config, "version", 1)
        attention = (
            "scaled cosine window attention with a log-spaced position MLP (V2)"
            if version == 2
            else "window attention with a relative position bias per window"
        )
        if getattr(model.config, "cr", False):
            attention = "scaled cosine window attention, an MLP bias over log offsets (V2-CR)"
        return (attention, "shifted windows every other block", "patch merging between stages",
                "head reads the mean of the last stage's tokens")  # fmt: skip

    # -- loading, model code and training (helper "loading") ---------------------------------
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

    def analyze(self, loaded: LoadedModel, image: ImageInput, **options: Any) -> SwinAnalysis:
        """``gradients`` only where the model has a head (its classes' gradients)."""
        from vitviz.kinds.swin import engine_data
        from vitviz.kinds.swin.analysis import analyze_swin

        if options.get("gradients"):
            options["gradients"] = engine_data.has_head(getattr(loaded, "model", loaded))
        return self.keeping_blocks(loaded, lambda: analyze_swin(loaded, image, **options))

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

    def readout(self, model: nn.Module) -> Any:
        """head(mean(norm(tokens))) at the last stage's width (DESIGN §5)."""
        from vitviz.kinds.readouts import mean_pool_readout
        from vitviz.kinds.swin.network import SwinTransformer

        if not isinstance(model, SwinTransformer):
            return super().readout(model)
        return mean_pool_readout(model.norm, model.head, int(model.config.dims[-1]))

    def tokens_on_grid(
        self, model: nn.Module, x: Tensor, layer: LayerChoice
    ) -> Callable[[Tensor, tuple[int, int]], Tensor]:
        """A block's maps (B, H, W, C), its norms' too, on its grid (DESIGN §5)."""
        from vitviz.kinds.swin.intermediates import swin_tokens_on_grid

        return swin_tokens_on_grid

    def map_picture(
        self,
        analysis: SwinAnalysis,
        map_: np.ndarray,
        colormap: str,
        max_side: int | None,
        title: list[str] | None,
    ) -> Image.Image:
        """Over the model input, untitled (each map at its own grid: a block's, a stage's)."""
        from vitviz.kinds.swin.output import swin_map_picture

        return swin_map_picture(analysis, map_, colormap)

    def layer_rows(self, analysis: SwinAnalysis) -> tuple[LayerRow, ...]:
        rows = []
        for attn, layout, name in zip(
            analysis.attentions,
            analysis.layouts,
            self.block_names(analysis.block_stages),
            strict=True,
        ):
            kind = "SW" if layout.shifted else "W"
            label = f"{name} {kind}"
            where = f"block {name} {kind}-MSA (window {layout.window[0]}"
            where += f", shift {layout.shift[0]})" if layout.shifted else ")"
            rows.append(
                LayerRow(
                    label,
                    int(attn.shape[1]),
                    name=name,
                    title=where,
                    hover=f"block {label}",
                    selector=f" · {label}",
                )
            )
        return tuple(rows)

    # -- engine and window (helper "engine"), in vitviz.kinds.swin.engine_data ------------------
    def model_shape(self, loaded: Loaded) -> ModelShape:
        from vitviz.kinds.swin import engine_data

        return engine_data.model_shape(loaded)

    def thumbnails(self, analysis: SwinAnalysis) -> tuple[tuple[int, int], int]:
        from vitviz.kinds.swin.engine_data import thumbnail_grid

        return thumbnail_grid(analysis.stage_grids, analysis.patch_size)

    def method_map(
        self,
        session: Session,
        method: str,
        query: tuple[int, int] | None,
        target_class: int | None,
        params: Mapping[str, Any],
    ) -> np.ndarray:
        from vitviz.kinds.swin import engine_data

        return engine_data.method_map(session, method, query, target_class, params)

    def curves(
        self, session: Session, names: list[str], options: dict[str, Any]
    ) -> FaithfulnessReport:
        from vitviz.kinds.swin.faithfulness import evaluate_swin_methods

        return evaluate_swin_methods(session.analysis, session.loaded.model, names, **options)

    def export_npz(
        self,
        session: Session,
        path: Path,
        method: str,
        params: Mapping[str, Any],
        target_class: int | None,
    ) -> Path:
        from vitviz.kinds.swin import engine_data

        return engine_data.export_npz(session, path, method, params, target_class)

    def view_map_picture(
        self, session: Session, values: np.ndarray, colormap: str, opacity: float
    ) -> Image.Image:
        from vitviz.kinds.swin.output import swin_map_picture

        return swin_map_picture(session.analysis, values, colormap, opacity)


KIND = SwinKind()
