"""The MViTv2 kind (Multiscale Vision Transformer v2, Li et al. 2022; timm's ``mvitv2_*``):
stages of pooled attention, each block's queries on its stage's grid attending over keys and
values pooled to a coarser key grid, a decomposed relative position bias, residual pooling, and
(the ``_cls`` forms) a CLS token through every block.

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
    from vitviz.kindapi.protocol import (
        ImageInput,
        Loaded,
        ViewWords,
    )
    from vitviz.kinds.mvit.analysis import MViTAnalysis
    from vitviz.kinds.mvit.config import MViTConfig


class MViTKind(StagedKind):
    """vitviz's MViT."""

    ENGINE_DATA = "vitviz.kinds.mvit.engine_data"  # its query maps and words (StagedKind)
    METHODS_MODULE = "vitviz.kinds.mvit.methods"
    OWNER = "an MViTv2"
    name = "mvit"
    label = "MViTv2 (multiscale ViT)"
    POOL_QUERY = "query: CLS token, or the mean of every query"
    POOL_SOURCE = "the CLS token"
    HEADS_TITLE = "Attention of every block and head, each over its pooled key grid"

    def architecture(self, model: nn.Module) -> str:
        cfg = model.config
        cls = ", CLS token" if cfg.use_cls_token else ""
        return (
            f"MViTv2, widths {'-'.join(map(str, cfg.dims))}, depths "
            f"{'-'.join(map(str, cfg.depths))}, heads {'-'.join(map(str, cfg.heads))}{cls}"
        )

    def parts(self, model: nn.Module) -> tuple[str, ...]:
        from vitviz.kinds.mvit.families import mvit_parts

        return mvit_parts(model.config)

    @property
    def families(self) -> Sequence[Any]:
        from vitviz.kinds.mvit.families import FAMILY

        return (FAMILY,)

    def config_from_dict(self, data: dict[str, object]) -> MViTConfig:
        from vitviz.kinds.mvit.config import MViTConfig

        return MViTConfig.from_dict(data)

    def build_from_state(self, config: MViTConfig, state: Mapping[str, Tensor]) -> nn.Module:
        import torch

        from vitviz.checkpoints.assign import assign_exactly
        from vitviz.kinds.mvit.network import MViT

        with torch.device("meta"):
            model = MViT(config)
        return assign_exactly(model, state, "MViTv2 model")

    def library_outputs(self, model: nn.Module, x: Tensor) -> tuple[Tensor, list[Tensor]]:
        out = model.forward_explained(x)
        return out.logits, out.attentions  # (B, heads, P + Nq, P + Nk), as timm's blocks

    def analyze(self, loaded: Loaded, image: ImageInput, **options: Any) -> MViTAnalysis:
        from vitviz.kinds.mvit.analysis import analyze_mvit

        return self.keeping_blocks(loaded, lambda: analyze_mvit(loaded, image))

    def staged_sites(self, model: nn.Module, x: Tensor) -> Any:
        """vitviz's MViT's blocks as its accessor reads them (None: another network)."""
        from vitviz.kinds.mvit.intermediates import MViTSites
        from vitviz.kinds.mvit.network import MViT

        return MViTSites(model) if isinstance(model, MViT) else None

    def kept_with_prefix(self, sites: Any, kept: Any) -> Any:
        """The CLS token each block carried (a model with one), as the accessor gives it."""
        import dataclasses

        if not sites.prefix:
            return kept
        prefixes = tuple(p.detach() for p in sites.prefixes if p is not None)
        if len(prefixes) != len(kept.blocks):
            return None
        return dataclasses.replace(kept, block_prefix=prefixes)

    def token_geometry(self, analysis: MViTAnalysis) -> TokenGeometry:
        P = analysis.num_prefix_tokens
        layers = tuple(
            LayerGrid(
                grid=tuple(analysis.stage_grids[s]),
                token_pixels=analysis.stage_pixels[s],
                num_prefix_tokens=P,
            )
            for s in analysis.block_stages
        )
        size = tuple(int(v) for v in analysis.input.shape[-2:])
        return TokenGeometry(
            input_size=size,
            grid=tuple(analysis.stage_grids[0]),
            cell_pixels=analysis.stage_pixels[0],
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
        """Blocks on their query grids with the CLS, heads before the projection with residual
        pooling added (DESIGN §3, §5)."""
        from vitviz.kinds.mvit.intermediates import mvit_intermediates

        return mvit_intermediates(model, x, replace, logits_only)

    def readout(self, model: nn.Module) -> Readout:
        """The final norm and the head on the mean of the patch tokens (or the CLS token), as
        the network reads its last block (DESIGN §5)."""
        import torch

        from vitviz.kindapi.intermediates import Readout

        P = int(model.config.num_prefix_tokens)
        width = int(model.config.blocks()[-1].dim_out)

        def logits(prefix: Tensor, patches: Tensor) -> Tensor:
            if prefix.shape[1] != P:
                raise ValueError(f"a block of this MViTv2 has {P} prefix tokens")
            return model.forward_head(torch.cat([prefix, patches], dim=1))

        return Readout(model.norm, logits, width)

    def tokens_on_grid(
        self, model: nn.Module, x: Tensor, layer: LayerChoice
    ) -> Callable[[Tensor, tuple[int, int]], Tensor]:
        """A block's tokens, its norms' too, row-major on their grid, the CLS left out."""
        from vitviz.kinds.mvit.intermediates import mvit_tokens_on_grid

        return mvit_tokens_on_grid(model, x, layer)

    def head_statistics(self, analysis: MViTAnalysis) -> dict[str, np.ndarray]:
        from vitviz.kinds.mvit.stats import head_statistics

        return head_statistics(analysis)

    def npz_arrays(self, analysis: MViTAnalysis) -> dict[str, np.ndarray]:
        from vitviz.kinds.mvit.export import mvit_arrays

        return mvit_arrays(analysis)

    def layer_rows(self, analysis: MViTAnalysis) -> tuple[LayerRow, ...]:
        rows = []
        P = analysis.num_prefix_tokens
        cls = " (and the CLS)" if P else ""
        names = self.block_names(analysis.block_stages)
        for b, (attn, s, name) in enumerate(
            zip(analysis.attentions, analysis.block_stages, names, strict=False)
        ):
            H, W = analysis.stage_grids[s]
            kh, kw = analysis.key_grids[b]
            rows.append(
                LayerRow(
                    name,
                    int(attn.shape[0]),
                    tooltip=f"block {name}: {H}×{W} queries{cls} attend to {kh}×{kw} pooled "
                    f"keys{cls}",
                    name=name,
                    title=f"block {name} ({H}×{W} queries, {kh}×{kw} keys)",
                    hover=f"block {name}",
                    selector=f" · {name}",
                )
            )
        return tuple(rows)

    def over_input(self, analysis: Any, values: np.ndarray, colormap: str, opacity: float) -> Any:
        """``values`` over the model input as the window draws it: a map on any grid of the
        model (a stage's, a block's key grid), each cell over its stride's square from the top
        left."""
        import numpy as np

        from vitviz.imaging.overlay import overlay_on_image

        values = np.asarray(values, dtype=np.float32)
        H, W = (int(v) for v in analysis.input.shape[-2:])
        h, w = values.shape
        rows = np.minimum(np.arange(H) * h // H, h - 1)
        cols = np.minimum(np.arange(W) * w // W, w - 1)
        return overlay_on_image(
            analysis.pixels, values[rows][:, cols], colormap=colormap, opacity=opacity
        )

    # -- engine and window ---------------------------------------------------------------------
    def view_words(self, analysis: Any) -> ViewWords:
        """The staged kinds' words, the query without a clicked cell being the CLS token (or
        the mean of every query's row)."""
        from dataclasses import replace

        none = "CLS token" if analysis.num_prefix_tokens else "mean of every query"
        return replace(
            super().view_words(analysis), query_none=none, title_query_none=f"query: {none}"
        )


KIND = MViTKind()
