"""The Vision Transformer kind: one grid of patch tokens after prefix tokens (CLS, registers).

Holds vitviz's own ``VisionTransformer`` and any module from a user's code whose attention
``vitviz.modelcode`` captures. ``KIND`` is what ``vitviz.kinds`` registers.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from vitviz.kindapi.protocol import KindMethod, LayerRow, TokenGeometry
from vitviz.kindapi.sides import TrainingSide
from vitviz.kinds.vit import training

if TYPE_CHECKING:  # torch-free at import; the ViT's analysis sits above the registry
    from pathlib import Path

    import numpy as np
    from PIL import Image
    from torch import Tensor, nn

    from vitviz.blocks import ViTConfig
    from vitviz.checkpoints import LoadedModel
    from vitviz.kindapi.intermediates import HeadReplacement, Intermediates
    from vitviz.kindapi.protocol import (
        FaithfulnessReport,
        ImageInput,
        ImageNumbers,
        Loaded,
        ModelShape,
        QueryMaps,
        Session,
    )
    from vitviz.kinds.vit.analysis import Analysis
    from vitviz.pipeline.batch import BatchItem


class ViTKind:
    """A ViT: every layer attends over [prefix tokens..., patches row-major over the grid]."""

    name = "vit"
    label = "Vision Transformer"
    catch_all = True  # tried last: its generic layouts and any captured model of a user's code

    def owns(self, model: nn.Module) -> bool:
        from vitviz.blocks.protocol import ExplainableModel

        return isinstance(model, ExplainableModel)

    def architecture(self, model: nn.Module) -> str:
        cfg = model.config.to_dict()
        return f"dim {cfg['dim']}, depth {cfg['depth']}, heads {cfg['heads']}"

    def parts(self, model: nn.Module) -> tuple[str, ...]:
        from vitviz.blocks import VisionTransformer
        from vitviz.blocks.parts import vit_parts

        if isinstance(model, VisionTransformer):
            return vit_parts(model.config)
        return ("the attention your code computes (captured)",)

    @property
    def families(self) -> Sequence[Any]:
        from vitviz.kinds.vit.families import FAMILIES

        return FAMILIES

    # -- loading, model code and training (helper "loading") ---------------------------------
    def config_from_dict(self, data: dict[str, object]) -> ViTConfig:
        from vitviz.blocks import ViTConfig

        return ViTConfig.from_dict(data)

    def build_from_state(self, config: ViTConfig, state: Mapping[str, Tensor]) -> nn.Module:
        from vitviz.checkpoints.native import build_model

        return build_model(config, state)

    def library_outputs(self, model: nn.Module, x: Tensor) -> tuple[Tensor, Sequence[Tensor]]:
        out = model.forward_explained(x, capture_attention=True)
        return out.logits, out.attentions

    @property
    def model_code(self) -> None:
        return None  # vitviz.modelcode's generic capture opens a ViT from a user's file

    @property
    def training(self) -> TrainingSide:
        return training.SIDE

    def probabilities(self, model: nn.Module, logits: Tensor) -> Tensor:
        return logits.softmax(dim=-1)

    def rescore(self, analysis: Analysis, loaded: Loaded) -> None:
        return None  # its classes never change under an analysis

    def apply_prompts(self, loaded: Loaded, prompts: Sequence[str]) -> str | None:
        return "a ViT's classes are its head's; prompts need a CLIP-style model with a text tower"

    def analyze(self, loaded: LoadedModel, image: ImageInput, **options: Any) -> Analysis:
        from vitviz.kinds.vit.analysis import analyze_vit

        return analyze_vit(loaded, image, **options)

    def analyze_images(
        self, loaded: LoadedModel, images: Sequence[ImageInput], **options: Any
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
        from vitviz.kinds.vit import engine_data

        return engine_data.token_geometry(analysis)

    def intermediates(
        self, model: nn.Module, x: Tensor, *, replace: HeadReplacement | None = None
    ) -> Intermediates:
        """Every block's output and every head before the output projection (DESIGN §3)."""
        from vitviz.kinds.vit.intermediates import vit_intermediates

        return vit_intermediates(model, x, replace=replace)

    def implementation(self, method: str) -> KindMethod | None:
        from vitviz.kinds.vit.methods import METHODS

        return METHODS.get(method)

    def missing_method(self, method: str) -> str | None:
        from vitviz.kinds.vit.methods import CANNOT

        return CANNOT.get(method)

    def parameter_bounds(self, subject: Analysis | nn.Module) -> tuple[int, int]:
        from torch import nn

        if isinstance(subject, nn.Module):
            cfg = subject.config
            return int(cfg.depth), int(cfg.heads)
        return int(getattr(subject, "model_layers", subject.num_layers)), int(subject.num_heads)

    def head_statistics(self, analysis: Analysis) -> dict[str, np.ndarray]:
        return {
            "distance": analysis.mean_distance.float().numpy(),
            "entropy": analysis.entropy.float().numpy(),
            "prefix_share": analysis.prefix_share.float().numpy(),
        }

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

    def unused_options(self) -> Mapping[str, str]:
        return {}

    def layer_rows(self, analysis: Analysis) -> tuple[LayerRow, ...]:
        from vitviz.kinds.vit import engine_data

        return engine_data.layer_rows(analysis)

    # -- engine and window (helper "engine"), in vitviz.kinds.vit.engine_data -------------------
    def model_shape(self, loaded: Loaded) -> ModelShape:
        from vitviz.kinds.vit import engine_data

        return engine_data.model_shape(loaded)

    def check_memory(self, model: nn.Module, image_size: tuple[int, int]) -> None:
        from vitviz.kinds.vit import engine_data

        engine_data.check_memory(model, image_size)

    def image_numbers(self, session: Session) -> ImageNumbers:
        from vitviz.kinds.vit import engine_data

        return engine_data.image_numbers(session)

    def default_class(self, session: Session) -> int:
        return int(session.analysis.top_class)

    def query_maps(self, session: Session, query: tuple[int, int] | None) -> QueryMaps:
        from vitviz.kinds.vit import engine_data

        return engine_data.query_maps(session, query)

    def method_map(
        self,
        session: Session,
        method: str,
        query: tuple[int, int] | None,
        target_class: int | None,
        params: Mapping[str, Any],
    ) -> np.ndarray:
        from vitviz.kinds.vit import engine_data

        return engine_data.method_map(session, method, query, target_class, params)

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
        from vitviz.kinds.vit import engine_data

        return engine_data.evaluate_faithfulness(
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
        from vitviz.kinds.vit import engine_data

        return engine_data.export_npz(session, path, method, params, target_class)

    def view_heads_picture(
        self,
        session: Session,
        query: tuple[int, int] | None,
        colormap: str,
        opacity: float,
        per_head: bool,
    ) -> Image.Image:
        from vitviz.kinds.vit import engine_data

        return engine_data.heads_picture(session, query, colormap, opacity, per_head)

    def view_map_picture(
        self, session: Session, values: np.ndarray, colormap: str, opacity: float
    ) -> Image.Image:
        from vitviz.kinds.vit import engine_data

        return engine_data.map_picture(session, values, colormap, opacity)


KIND = ViTKind()
