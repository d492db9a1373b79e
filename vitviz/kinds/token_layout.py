"""``TokenLayoutKind``: what the kinds whose layers attend over one token layout share, [prefix
tokens..., patches row-major over one grid]: the ViT kind and those on its analysis (DESIGN §3).

Their analysis is the ViT's (``vitviz.kinds.vit.analysis.analyze_vit``, batched by
``vitviz.kinds.vit.batch``), made into the kind's own by ``finish_analysis``; the engine's
members are ``vitviz.kinds.vit.engine_data``'s, the npz and pictures the ViT's, the head
statistics those the analysis computed, the intermediates the shared token accessor's. A kind on
it writes its identity, loading and what differs. Torch-free at import.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from vitviz.kindapi.base import KindBase

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np
    from PIL import Image
    from torch import Tensor, nn

    from vitviz.kindapi.feature_sites import LayerChoice
    from vitviz.kindapi.intermediates import (
        BlockOutputs,
        HeadReplacement,
        Intermediates,
        Readout,
    )
    from vitviz.kindapi.protocol import (
        FaithfulnessReport,
        ImageInput,
        ImageNumbers,
        LayerRow,
        Loaded,
        ModelShape,
        QueryMaps,
        Session,
        TokenGeometry,
    )
    from vitviz.kinds.vit.analysis import Analysis
    from vitviz.pipeline.batch import BatchItem


class TokenLayoutKind(KindBase):
    """One grid of patch tokens after prefix tokens, in every layer: the ViT's analysis."""

    METHODS_MODULE = "vitviz.kinds.vit.methods"

    # -- identity and words --------------------------------------------------------------------
    def architecture(self, model: nn.Module) -> str:
        cfg = model.config.to_dict()
        return f"dim {cfg['dim']}, depth {cfg['depth']}, heads {cfg['heads']}"

    def parts(self, model: nn.Module) -> tuple[str, ...]:
        from vitviz.blocks.parts import vit_parts

        return vit_parts(model.config)

    # -- loading -------------------------------------------------------------------------------
    def library_outputs(self, model: nn.Module, x: Tensor) -> tuple[Tensor, Sequence[Tensor]]:
        out = model.forward_explained(x, capture_attention=True)
        return out.logits, out.attentions

    # -- analysing -----------------------------------------------------------------------------
    def analyze(self, loaded: Loaded, image: ImageInput, **options: Any) -> Analysis:
        from vitviz.kinds.vit.analysis import analyze_vit

        return analyze_vit(loaded, image, **options)

    def analyze_images(
        self, loaded: Loaded, images: Sequence[ImageInput], **options: Any
    ) -> Iterator[BatchItem]:
        """Batched forward passes (``vitviz.kinds.vit.batch.iter_analyses`` and its options)."""
        from vitviz.kinds.vit.batch import iter_analyses

        return iter_analyses(loaded, images, **options)

    def finish_analysis(self, analysis: Analysis) -> Analysis:
        """As made; a model whose head is an attention pool (MAP) adds its probe's attention,
        the row its maps start from (``ProbeAnalysis``)."""
        from vitviz.blocks.attention_pool import AttentionPool

        model = None if analysis.loaded is None else analysis.loaded.model
        if not isinstance(getattr(model, "pool", None), AttentionPool):
            return analysis
        from vitviz.kinds.vit.probe_analysis import ProbeAnalysis

        return ProbeAnalysis.of(analysis)

    def token_geometry(self, analysis: Any) -> TokenGeometry:
        from vitviz.kinds.vit.engine_data import token_geometry

        return token_geometry(analysis)

    def intermediates(
        self,
        model: nn.Module,
        x: Tensor,
        *,
        replace: HeadReplacement | None = None,
        logits_only: bool = False,
    ) -> Intermediates:
        """Every block's output and every head before the output projection (DESIGN §3)."""
        from vitviz.kinds.vit.intermediates import vit_intermediates

        return vit_intermediates(model, x, replace=replace, logits_only=logits_only)

    def readout(self, model: nn.Module) -> Readout:
        """The final norm, then the model's own head (DESIGN §5)."""
        from vitviz.kinds.readouts import token_layout_readout

        return token_layout_readout(model)

    def analysis_blocks(self, analysis: Any) -> BlockOutputs | None:
        """The capture pass's block outputs, as ``intermediates`` lays them out (DESIGN §5)."""
        from vitviz.kinds.vit.block_outputs import vit_analysis_blocks

        return vit_analysis_blocks(analysis)

    def tokens_on_grid(
        self, model: nn.Module, x: Tensor, layer: LayerChoice
    ) -> Callable[[Tensor, tuple[int, int]], Tensor]:
        """A block's tokens (B, N, C) end with its grid's, row-major (DESIGN §3): the last
        h·w of them, (B, C, h, w)."""

        def on_grid(tokens: Tensor, grid: tuple[int, int]) -> Tensor:
            h, w = grid
            return tokens[:, tokens.shape[1] - h * w :].transpose(1, 2).unflatten(-1, (h, w))

        return on_grid

    # -- methods -------------------------------------------------------------------------------
    def parameter_bounds(self, subject: Analysis | nn.Module) -> tuple[int, int]:
        from torch import nn

        if isinstance(subject, nn.Module):
            cfg = subject.config
            return int(cfg.depth), int(getattr(cfg, "layer_heads", cfg.heads))
        return int(getattr(subject, "model_layers", subject.num_layers)), int(subject.num_heads)

    def head_statistics(self, analysis: Analysis) -> dict[str, np.ndarray]:
        return {
            "distance": analysis.mean_distance.float().numpy(),
            "entropy": analysis.entropy.float().numpy(),
            "prefix_share": analysis.prefix_share.float().numpy(),
        }

    # -- presenting ----------------------------------------------------------------------------
    def npz_arrays(self, analysis: Analysis) -> dict[str, np.ndarray]:
        import numpy as np

        return {
            "attention": analysis.attention_numpy(),  # the one time (L, H, N, N) crosses
            "grid": np.array(analysis.grid, dtype=np.int64),
            "num_prefix_tokens": np.array(analysis.num_prefix_tokens, dtype=np.int64),
            "mean_distance": analysis.mean_distance.numpy().astype(np.float32),
            "entropy": analysis.entropy.numpy().astype(np.float32),
            "layers": np.array(analysis.layer_indices, dtype=np.int64),
        }

    def map_picture(
        self,
        analysis: Analysis,
        map_: np.ndarray,
        colormap: str,
        max_side: int | None,
        title: list[str] | None,
    ) -> Image.Image:
        from vitviz.kinds.vit.pictures import vit_map_picture

        return vit_map_picture(analysis, map_, colormap, max_side, title)

    def heads_picture(self, analysis: Analysis, colormap: str, titled: bool) -> Image.Image | None:
        from vitviz.kinds.vit.pictures import heads_grid

        return heads_grid(analysis, colormap, titled=titled)

    def layer_rows(self, analysis: Analysis) -> tuple[LayerRow, ...]:
        from vitviz.kinds.vit.engine_data import layer_rows

        return layer_rows(analysis)

    # -- engine and window, in vitviz.kinds.vit.engine_data --------------------------------------
    def model_shape(self, loaded: Loaded) -> ModelShape:
        from vitviz.kinds.vit.engine_data import model_shape

        return model_shape(loaded)

    def check_memory(self, model: nn.Module, image_size: tuple[int, int]) -> None:
        from vitviz.kinds.vit.engine_data import check_memory

        check_memory(model, image_size)

    def image_numbers(self, session: Session) -> ImageNumbers:
        from vitviz.kinds.vit.engine_data import image_numbers

        return image_numbers(session)

    def default_class(self, session: Session) -> int:
        return int(session.analysis.top_class)

    def query_maps(self, session: Session, query: tuple[int, int] | None) -> QueryMaps:
        from vitviz.kinds.vit.engine_data import query_maps

        return query_maps(session, query)

    def method_map(
        self,
        session: Session,
        method: str,
        query: tuple[int, int] | None,
        target_class: int | None,
        params: Mapping[str, Any],
    ) -> np.ndarray:
        from vitviz.kinds.vit.engine_data import method_map

        return method_map(session, method, query, target_class, params)

    def evaluate_faithfulness(
        self,
        session: Session,
        names: Sequence[str],
        *,
        steps: int,
        mask: np.ndarray | None,
        name: str,
        params: Mapping[str, Mapping[str, Any]],
    ) -> FaithfulnessReport:
        from vitviz.kinds.vit.engine_data import evaluate_faithfulness

        return evaluate_faithfulness(
            session, names, steps=steps, mask=mask, name=name, params=params
        )

    def export_npz(
        self,
        session: Session,
        path: Path,
        method: str,
        params: Mapping[str, Any],
        target_class: int | None,
    ) -> Path:
        from vitviz.kinds.vit.engine_data import export_npz

        return export_npz(session, path, method, params, target_class)

    def view_heads_picture(
        self,
        session: Session,
        query: tuple[int, int] | None,
        colormap: str,
        opacity: float,
        per_head: bool,
    ) -> Image.Image:
        from vitviz.kinds.vit.engine_data import heads_picture

        return heads_picture(session, query, colormap, opacity, per_head)

    def view_map_picture(
        self, session: Session, values: np.ndarray, colormap: str, opacity: float
    ) -> Image.Image:
        from vitviz.kinds.vit.engine_data import map_picture

        return map_picture(session, values, colormap, opacity)
