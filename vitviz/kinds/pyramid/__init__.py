"""The pyramid ViT kind (PVT v2, Twins, Hiera): token grids that shrink from stage to stage;
PVT v2's and Twins' attention from every token to spatially reduced keys (Twins-SVT's every
other block within ws × ws windows), Hiera's from 2 × 2 max-pooled queries (at a stage's first
block) to the tokens of their mask unit (first stages) or to all.

``KIND`` is what ``vitviz.kinds`` registers; the network, its checkpoint families, its analysis
and its versions of the table's methods are the modules beside this one. vitviz does not train
one (``training`` is None: the Training tab does not offer it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from vitviz.kinds.staged import StagedKind

if TYPE_CHECKING:
    import numpy as np
    from torch import Tensor, nn

    from vitviz.kindapi.protocol import LayerRow
    from vitviz.kinds.pyramid.analysis import PyramidAnalysis
    from vitviz.kinds.pyramid.config import PyramidConfig
    from vitviz.kinds.pyramid.hiera_config import HieraConfig


def _hiera_words(cfg: object) -> Any:
    """``hiera_words`` for a Hiera's config, None for a PVT v2's."""
    from vitviz.kinds.pyramid import hiera_words
    from vitviz.kinds.pyramid.hiera_config import HieraConfig

    return hiera_words if isinstance(cfg, HieraConfig) else None


class PyramidKind(StagedKind):
    """vitviz's PyramidViT (PVT v2) and HieraViT (Hiera)."""

    ENGINE_DATA = "vitviz.kinds.pyramid.engine_data"  # its query maps and words (StagedKind)
    METHODS_MODULE = "vitviz.kinds.pyramid.methods"
    FAMILIES = tuple(
        f"vitviz.kinds.pyramid.families.{module}:FAMILY"
        for module in ("timm", "huggingface", "timm_hiera", "hf_hiera", "timm_twins", "hf_pvt")
    )
    ANALYZE = "vitviz.kinds.pyramid.analysis:analyze_pyramid"
    # blocks on their grids, heads before the projection, row-major (DESIGN §3); a block's
    # tokens on its grid (a Hiera's unrolled order undone)
    INTERMEDIATES = "vitviz.kinds.pyramid.intermediates:pyramid_intermediates"
    TOKENS_ON_GRID = "vitviz.kinds.pyramid.intermediates:pyramid_tokens_on_grid"
    HEAD_STATISTICS = "vitviz.kinds.pyramid.stats:head_statistics"
    NPZ_ARRAYS = "vitviz.kinds.pyramid.export:pyramid_arrays"
    OWNER = "a pyramid ViT"
    name = "pyramid"
    label = "Pyramid ViT (PVT v2, Twins, Hiera)"
    POOL_QUERY = "query: mean over the tokens"
    POOL_WORDS = "mean over the tokens"
    POOL_SOURCE = "the mean of the last stage's tokens"
    HEADS_TITLE = "Spatial-reduction attention of every block and head"

    def architecture(self, model: nn.Module) -> str:
        cfg = model.config
        hiera = _hiera_words(cfg)
        if hiera is not None:
            return hiera.architecture(cfg)
        keys = "linear SRA (keys pooled to 7×7)" if cfg.linear else (
            f"reductions {'-'.join(map(str, cfg.sr_ratios))}"
        )  # fmt: skip
        name = ("Twins-SVT" if cfg.windows else "Twins-PCPVT") if cfg.pos_conv else "PVT v2"
        name = "PVT v1" if cfg.cls_last else name
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
        if cfg.cls_last:
            return (
                f"non-overlapping patch embeddings (stride {cfg.patch_size}, then "
                f"{cfg.down_stride}), LayerNorm, a learned position table per stage",
                attention,
                "pre-norm blocks, plain MLP",
                "a CLS token joins in the last stage (keys unreduced there)",
                "one LayerNorm at the end; head reads the CLS token",
            )
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

    def config_from_dict(self, data: dict[str, object]) -> PyramidConfig | HieraConfig:
        from vitviz.kinds.pyramid.config import PyramidConfig
        from vitviz.kinds.pyramid.hiera_config import HieraConfig

        return (HieraConfig if "mask_unit" in data else PyramidConfig).from_dict(data)

    def build_from_state(
        self, config: PyramidConfig | HieraConfig, state: Mapping[str, Tensor]
    ) -> nn.Module:
        from vitviz.kinds.pyramid.families.common import build_pyramid

        return build_pyramid(config, state)

    def staged_sites(self, model: nn.Module, x: Tensor) -> Any:
        """A PVT v2's, Twins' or Hiera's blocks as its accessor reads them (None: another)."""
        from vitviz.kinds.pyramid.intermediates import pyramid_sites

        return pyramid_sites(model, x)

    def carries_prefix(self, sites: Any) -> bool:
        """A PVT v1's last-stage blocks carry the CLS token (every other pyramid's: none)."""
        return any(getattr(sites, "prefix", ()))

    def layer_prefix(self, analysis: PyramidAnalysis, layer: int) -> int:
        """A PVT v1's last stage: its CLS."""
        return analysis.prefix_of(layer)

    def layer_windows(self, analysis: PyramidAnalysis, layer: int) -> np.ndarray | None:
        """A Hiera block's mask units (a Twins-SVT's windows), None: global."""
        return analysis.windows[layer] if analysis.windows else None

    def readout(self, model: nn.Module) -> Any:
        """PVT v2 / Twins: head(mean(last stage's norm(tokens))); Hiera: its head, the norm
        of the mean token (DESIGN §5)."""
        from vitviz.kindapi.intermediates import Readout
        from vitviz.kinds.pyramid.hiera_network import HieraViT
        from vitviz.kinds.readouts import mean_pool_readout, norm_of_mean_readout

        width = int(model.config.dims[-1])
        if isinstance(model, HieraViT):
            return norm_of_mean_readout(model.head, model.head.norm, width)
        if model.config.cls_last:  # PVT v1: head(norm(CLS)), a block without one its mean
            return Readout(
                model.stages[-1].norm,
                lambda prefix, patches: model.head(
                    model.stages[-1].norm(prefix[:, 0] if prefix.shape[1] else patches.mean(1))
                ),
                width,
            )
        return mean_pool_readout(model.stages[-1].norm, model.head, width)

    def default_cam_part(self, model: nn.Module) -> str:
        """A Hiera's last block may pool: its norm2 is on the last grid (a PVT's: the
        kind's default, its pre-norm norm1)."""
        from vitviz.kinds.pyramid.hiera_network import HieraViT

        return "norm2" if isinstance(model, HieraViT) else super().default_cam_part(model)

    def layer_rows(self, analysis: PyramidAnalysis) -> tuple[LayerRow, ...]:
        rows = []
        cls = [" and the CLS" if analysis.prefix_of(b) else "" for b in range(len(analysis.keys))]
        for attn, s, words, keys, name, c in zip(
            analysis.attentions,
            analysis.block_stages,
            analysis.reductions,
            analysis.keys,
            self.block_names(analysis.block_stages),
            cls,
            strict=True,
        ):
            H, W = analysis.stage_grids[s]
            kh, kw = keys.coarse
            tip = f"block {name}: queries {H}×{W} tokens{c}, {words}{c}"
            title = f"block {name} ({H}×{W} queries{c}, {kh}×{kw} keys{c})"
            rows.append(self.named_row(name, int(attn.shape[0]), tip, title, "block"))
        return tuple(rows)

    # -- engine and window ---------------------------------------------------------------------
    def view_words(self, analysis: Any) -> Any:
        """The staged kinds' words; a PVT v1's query without a clicked cell is its last
        stage's CLS token (its blocks before that stage: the mean of every query's row)."""
        from dataclasses import replace

        words = super().view_words(analysis)
        if not any(analysis.prefix):
            return words
        none = "CLS token (earlier stages: the mean of every query)"
        return replace(
            words,
            query_none=none,
            title_query_none=f"query: {none}",
            method_query_none=words.method_query_none.replace(self.POOL_SOURCE, "the CLS token"),
        )


KIND = PyramidKind()
