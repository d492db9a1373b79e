"""The pyramid ViT kind (PVT v2, Twins, Hiera): token grids that shrink from stage to stage;
PVT v2's and Twins' attention from every token to spatially reduced keys (Twins-SVT's every
other block within ws × ws windows), Hiera's from 2 × 2 max-pooled queries (at a stage's first
block) to the tokens of their mask unit (first stages) or to all.

``KIND`` is what ``vitviz.kinds`` registers; the network, its checkpoint families, its analysis
and its versions of the table's methods are the modules beside this one. vitviz does not train
one (``training`` is None: the Training tab does not offer it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from vitviz.kindapi.protocol import KindMethod, LayerGrid, LayerRow, TokenGeometry
from vitviz.kinds.staged_engine import StagedEngineMembers

if TYPE_CHECKING:
    import numpy as np
    from PIL import Image
    from torch import Tensor, nn

    from vitviz.kindapi.intermediates import HeadReplacement, Intermediates
    from vitviz.kindapi.protocol import (
        ImageInput,
        Loaded,
        ModelShape,
        Session,
    )
    from vitviz.kinds.pyramid.analysis import PyramidAnalysis
    from vitviz.kinds.pyramid.config import PyramidConfig
    from vitviz.kinds.pyramid.hiera_config import HieraConfig

UNUSED_OPTIONS = {
    "layers": "applies to ViT models; a pyramid ViT's analysis keeps every block",
    "batch_size": "is not used on a pyramid ViT: its images are analysed one at a time",
    "attention_dtype": "is not used on a pyramid ViT: its attention is kept as the model "
    "computes it",
    "max_side": "is not used on a pyramid ViT: its map PNGs are drawn over the model input",
}


def _hiera_words(cfg: object) -> Any:
    """``hiera_words`` for a Hiera's config, None for a PVT v2's."""
    from vitviz.kinds.pyramid import hiera_words
    from vitviz.kinds.pyramid.hiera_config import HieraConfig

    return hiera_words if isinstance(cfg, HieraConfig) else None


class PyramidKind(StagedEngineMembers):
    """vitviz's PyramidViT (PVT v2) and HieraViT (Hiera)."""

    ENGINE_DATA = "vitviz.kinds.pyramid.engine_data"  # its engine members (StagedEngineMembers)
    name = "pyramid"
    label = "Pyramid ViT (PVT v2, Twins, Hiera)"

    def owns(self, model: nn.Module) -> bool:
        return getattr(model, "model_kind", None) == self.name

    def architecture(self, model: nn.Module) -> str:
        cfg = model.config
        hiera = _hiera_words(cfg)
        if hiera is not None:
            return hiera.architecture(cfg)
        keys = "linear SRA (keys pooled to 7×7)" if cfg.linear else (
            f"reductions {'-'.join(map(str, cfg.sr_ratios))}"
        )  # fmt: skip
        name = ("Twins-SVT" if cfg.windows else "Twins-PCPVT") if cfg.pos_conv else "PVT v2"
        return (
            f"{name}, widths {'-'.join(map(str, cfg.dims))}, "
            f"depths {'-'.join(map(str, cfg.depths))}, heads {'-'.join(map(str, cfg.heads))}, "
            f"{keys}"
        )

    def parts(self, model: nn.Module) -> tuple[str, ...]:
        cfg = model.config
        hiera = _hiera_words(cfg)
        if hiera is not None:
            return hiera.parts(cfg)
        attention = (
            "linear spatial-reduction attention (keys: adaptive average pool to 7×7, 1×1 conv, "
            "LayerNorm, GELU)"
            if cfg.linear
            else "spatial-reduction attention (keys and values from a strided conv + LayerNorm)"
        )
        if cfg.pos_conv:
            from vitviz.kinds.pyramid.families.timm_twins import twins_parts

            return twins_parts(cfg)
        return (
            f"overlapping conv stem (kernel {cfg.stem_kernel}, stride {cfg.patch_size}), LayerNorm",
            attention,
            "pre-norm blocks, LayerNorm eps 1e-6",
            "MLP with a depthwise 3×3 conv before the GELU"
            + (" (and a ReLU)" if cfg.linear else ""),
            "no position embedding, no CLS token",
            "overlapping conv downsampling (kernel 3, stride 2) between stages",
            "a LayerNorm at the end of each stage",
            "head reads the mean of the last stage's tokens",
        )

    @property
    def families(self) -> Sequence[Any]:
        from vitviz.kinds.pyramid.families import (
            hf_hiera,
            huggingface,
            timm,
            timm_hiera,
            timm_twins,
        )

        return (
            timm.FAMILY, huggingface.FAMILY, timm_hiera.FAMILY, hf_hiera.FAMILY, timm_twins.FAMILY,
        )  # fmt: skip

    def config_from_dict(self, data: dict[str, object]) -> PyramidConfig | HieraConfig:
        from vitviz.kinds.pyramid.config import PyramidConfig
        from vitviz.kinds.pyramid.hiera_config import HieraConfig

        return (HieraConfig if "mask_unit" in data else PyramidConfig).from_dict(data)

    def build_from_state(
        self, config: PyramidConfig | HieraConfig, state: Mapping[str, Tensor]
    ) -> nn.Module:
        from vitviz.kinds.pyramid.families.common import build_pyramid

        return build_pyramid(config, state)

    def library_outputs(self, model: nn.Module, x: Tensor) -> tuple[Tensor, list[Tensor]]:
        out = model.forward_explained(x, capture_attention=True)
        # as timm's blocks compute them: PVT v2's (B, heads, N_q, N_kv); a Hiera's unrolled,
        # (B, heads, units, t_q, t_k) within mask units
        return out.logits, out.attentions

    @property
    def model_code(self) -> None:
        return None

    @property
    def training(self) -> None:
        return None  # vitviz trains no pyramid ViT: the Training tab does not offer one

    def probabilities(self, model: nn.Module, logits: Tensor) -> Tensor:
        return logits.softmax(dim=-1)

    def rescore(self, analysis: PyramidAnalysis, loaded: Loaded) -> None:
        return None

    def apply_prompts(self, loaded: Loaded, prompts: Sequence[str]) -> str | None:
        return "a pyramid ViT's classes are its head's; prompts need a CLIP-style model"

    def finish_analysis(self, analysis: PyramidAnalysis) -> PyramidAnalysis:
        return analysis

    def analyze(self, loaded: Loaded, image: ImageInput, **options: Any) -> PyramidAnalysis:
        from vitviz.kinds.pyramid.analysis import analyze_pyramid

        model = getattr(loaded, "model", loaded)
        gradients = bool(options.get("gradients")) and int(model.config.num_classes) > 0
        return analyze_pyramid(loaded, image, gradients, options.get("target_class"))

    def token_geometry(self, analysis: PyramidAnalysis) -> TokenGeometry:
        windows = analysis.windows or [None] * len(analysis.block_stages)
        layers = tuple(
            LayerGrid(
                grid=tuple(analysis.stage_grids[s]),
                token_pixels=analysis.stage_pixels[s],
                windows=w,  # a Hiera block's mask units (a Twins-SVT's windows), None: global
            )
            for s, w in zip(analysis.block_stages, windows, strict=True)
        )
        size = tuple(int(v) for v in analysis.input.shape[-2:])
        return TokenGeometry(
            input_size=size,
            grid=tuple(analysis.stage_grids[0]),
            cell_pixels=analysis.stage_pixels[0],
            layers=layers,
        )

    def intermediates(
        self, model: nn.Module, x: Tensor, *, replace: HeadReplacement | None = None
    ) -> Intermediates:
        """Blocks on their grids, heads before the projection, row-major (DESIGN §3)."""
        from vitviz.kinds.pyramid.intermediates import pyramid_intermediates

        return pyramid_intermediates(model, x, replace)

    def implementation(self, method: str) -> KindMethod | None:
        from vitviz.kinds.pyramid.methods import METHODS

        return METHODS.get(method)

    def missing_method(self, method: str) -> str | None:
        from vitviz.kinds.pyramid.methods import CANNOT

        return CANNOT.get(method)

    def parameter_bounds(self, subject: PyramidAnalysis | nn.Module) -> tuple[int, int]:
        from torch import nn

        if isinstance(subject, nn.Module):
            return int(subject.config.depth), max(int(h) for h in subject.config.heads)
        return len(subject.attentions), max(int(a.shape[0]) for a in subject.attentions)

    def head_statistics(self, analysis: PyramidAnalysis) -> dict[str, np.ndarray]:
        from vitviz.kinds.pyramid.stats import head_statistics

        return head_statistics(analysis)

    def npz_arrays(self, analysis: PyramidAnalysis) -> dict[str, np.ndarray]:
        from vitviz.kinds.pyramid.export import pyramid_arrays

        return pyramid_arrays(analysis)

    def map_picture(
        self,
        analysis: PyramidAnalysis,
        map_: np.ndarray,
        colormap: str,
        max_side: int | None,
        title: list[str] | None,
    ) -> Image.Image:
        """Over the model input, untitled (each map at its own grid)."""
        from vitviz.kinds.pyramid.engine_data import picture

        return picture(analysis, map_, colormap, 0.6)

    def heads_picture(
        self, analysis: PyramidAnalysis, colormap: str, titled: bool
    ) -> Image.Image | None:
        return None  # the window's head grid shows its blocks; explain writes no picture

    def unused_options(self) -> Mapping[str, str]:
        return UNUSED_OPTIONS

    def layer_rows(self, analysis: PyramidAnalysis) -> tuple[LayerRow, ...]:
        rows, counts = [], {}
        for attn, s, words, keys in zip(
            analysis.attentions,
            analysis.block_stages,
            analysis.reductions,
            analysis.keys,
            strict=True,
        ):
            j = counts.get(s, 0)
            counts[s] = j + 1
            name = f"{s}.{j}"  # stages and blocks counted from 0
            H, W = analysis.stage_grids[s]
            kh, kw = keys.coarse
            rows.append(
                LayerRow(
                    name,
                    int(attn.shape[0]),
                    tooltip=f"block {name}: queries {H}×{W} tokens, {words}",
                    name=name,
                    title=f"block {name} ({H}×{W} queries, {kh}×{kw} keys)",
                    hover=f"block {name}",
                    selector=f" · {name}",
                )
            )
        return tuple(rows)

    # -- engine and window ---------------------------------------------------------------------
    def model_shape(self, loaded: Loaded) -> ModelShape:
        from vitviz.kinds.pyramid import engine_data

        return engine_data.model_shape(loaded, self)

    def check_memory(self, model: nn.Module, image_size: tuple[int, int]) -> None:
        return None  # its analysis memory is not modelled yet

    def view_map_picture(
        self, session: Session, values: np.ndarray, colormap: str, opacity: float
    ) -> Image.Image:
        from vitviz.kinds.pyramid import engine_data

        return engine_data.picture(session.analysis, values, colormap, opacity)


KIND = PyramidKind()
