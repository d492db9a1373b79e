"""The TNT kind (Transformer in Transformer, Han et al. 2021; timm's ``tnt_*``): each patch a
sub-grid of pixel tokens with an inner transformer of its own, whose projection is added to the
patch's token before an outer transformer over [CLS, patches], as a ViT's.

The window shows the outer attention on the patch grid, a row per block (DESIGN §5); the inner
attention (each patch's pixel tokens over each other) is checked against timm at load but not
drawn. ``KIND`` is what ``vitviz.kinds`` registers; the network, its checkpoint family, its
analysis and its versions of the table's methods are the modules beside this one. vitviz does
not train one (``training`` is None).
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
    from vitviz.kinds.tnt.analysis import TNTAnalysis
    from vitviz.kinds.tnt.config import TNTConfig


class TNTKind(StagedKind):
    """vitviz's TNT: one stage, its outer attention a ViT's over [CLS, patches]."""

    ENGINE_DATA = "vitviz.kinds.tnt.engine_data"  # its query maps and words (StagedKind)
    METHODS_MODULE = "vitviz.kinds.tnt.methods"
    OWNER = "a TNT"
    name = "tnt"
    label = "TNT (Transformer in Transformer)"
    POOL_QUERY = "query: CLS token"
    POOL_SOURCE = "the CLS token"
    HEADS_TITLE = "Outer attention of every block and head over the patch grid"

    def architecture(self, model: nn.Module) -> str:
        cfg = model.config
        legacy = ", legacy layout" if cfg.legacy else ""
        return (
            f"TNT, {cfg.depths[0]} blocks, outer width {cfg.embed_dim} ({cfg.heads[0]} heads), "
            f"inner width {cfg.inner_dim} ({cfg.inner_heads} heads), patch {cfg.patch_size}"
            f"{legacy}"
        )

    def parts(self, model: nn.Module) -> tuple[str, ...]:
        from vitviz.kinds.tnt.families import tnt_parts

        return tnt_parts(model.config)

    @property
    def families(self) -> Sequence[Any]:
        from vitviz.kinds.tnt.families import FAMILY

        return (FAMILY,)

    def config_from_dict(self, data: dict[str, object]) -> TNTConfig:
        from vitviz.kinds.tnt.config import TNTConfig

        return TNTConfig.from_dict(data)

    def build_from_state(self, config: TNTConfig, state: Mapping[str, Tensor]) -> nn.Module:
        import torch

        from vitviz.checkpoints.assign import assign_exactly
        from vitviz.kinds.tnt.network import TNT

        with torch.device("meta"):
            model = TNT(config)
        return assign_exactly(model, state, "TNT model")

    def library_outputs(self, model: nn.Module, x: Tensor) -> tuple[Tensor, list[Tensor]]:
        """Logits and each block's inner then outer probabilities, as timm's softmaxes run."""
        out = model.forward_explained(x)
        pairs = [a for inner, outer in zip(out.inner, out.attentions, strict=True)
                 for a in (inner, outer)]  # fmt: skip
        return out.logits, pairs

    def analyze(self, loaded: Loaded, image: ImageInput, **options: Any) -> TNTAnalysis:
        from vitviz.kinds.tnt.analysis import analyze_tnt

        return self.keeping_blocks(loaded, lambda: analyze_tnt(loaded, image))

    def staged_sites(self, model: nn.Module, x: Tensor) -> Any:
        """vitviz's TNT's blocks as its accessor reads them (None: another network)."""
        from vitviz.kinds.tnt.intermediates import TNTSites
        from vitviz.kinds.tnt.network import TNT

        return TNTSites(model) if isinstance(model, TNT) else None

    def kept_with_prefix(self, sites: Any, kept: Any) -> Any:
        """The CLS token each block carried, as the accessor gives it."""
        import dataclasses

        prefixes = tuple(p.detach() for p in sites.prefixes if p is not None)
        if len(prefixes) != len(kept.blocks):
            return None
        return dataclasses.replace(kept, block_prefix=prefixes)

    def token_geometry(self, analysis: TNTAnalysis) -> TokenGeometry:
        grid = tuple(analysis.stage_grids[0])
        layer = LayerGrid(grid=grid, token_pixels=analysis.patch_size, num_prefix_tokens=1)
        return TokenGeometry(
            input_size=tuple(int(v) for v in analysis.input.shape[-2:]),
            grid=grid,
            cell_pixels=analysis.patch_size,
            layers=(layer,) * len(analysis.attentions),
        )

    def intermediates(
        self,
        model: nn.Module,
        x: Tensor,
        *,
        replace: HeadReplacement | None = None,
        logits_only: bool = False,
    ) -> Intermediates:
        """Blocks on the patch grid with the CLS, the outer heads before the outer attention's
        projection (DESIGN §3, §5)."""
        from vitviz.kinds.tnt.intermediates import tnt_intermediates

        return tnt_intermediates(model, x, replace, logits_only)

    def readout(self, model: nn.Module) -> Readout:
        """The final norm and the head on the CLS token (or the mean of the patches), as the
        network reads its last block (DESIGN §5)."""
        import torch

        from vitviz.kindapi.intermediates import Readout

        def logits(prefix: Tensor, patches: Tensor) -> Tensor:
            if prefix.shape[1] != 1:
                raise ValueError("a block of this TNT has 1 prefix token (the CLS)")
            return model.forward_head(torch.cat([prefix, patches], dim=1))

        return Readout(model.norm, logits, int(model.config.embed_dim))

    def feature_site(self, model: nn.Module, x: Tensor, layer: LayerChoice) -> Any:
        """The CAM family's layer (DESIGN §5): a block's ``norm1`` (its outer attention's
        LayerNorm), ``norm2`` (its outer MLP's) or ``output``, whose token tensor is the
        second item of the block's output (the first: its pixel tokens)."""
        import dataclasses

        site = super().feature_site(model, x, layer)
        if not isinstance(site.module, type(model.blocks[0])):
            return site
        return dataclasses.replace(
            site,
            tensor=lambda output: output[1],
            replace=lambda output, tokens: (output[0], tokens, *output[2:]),
        )

    def tokens_on_grid(
        self, model: nn.Module, x: Tensor, layer: LayerChoice
    ) -> Callable[[Tensor, tuple[int, int]], Tensor]:
        """A block's patch tokens, its norms' too, row-major on the patch grid, the CLS left
        out."""
        from vitviz.kinds.tnt.intermediates import tnt_tokens_on_grid

        return tnt_tokens_on_grid(model, x, layer)

    def head_statistics(self, analysis: TNTAnalysis) -> dict[str, np.ndarray]:
        from vitviz.kinds.tnt.stats import head_statistics

        return head_statistics(analysis)

    def npz_arrays(self, analysis: TNTAnalysis) -> dict[str, np.ndarray]:
        from vitviz.kinds.tnt.export import tnt_arrays

        return tnt_arrays(analysis)

    def layer_rows(self, analysis: TNTAnalysis) -> tuple[LayerRow, ...]:
        h, w = analysis.stage_grids[0]
        n = "×".join(map(str, analysis.pixel_grid))
        L = len(analysis.attentions)
        return tuple(
            LayerRow(
                str(b),
                int(attn.shape[0]),
                tooltip=f"block {b}: outer attention of the CLS and {h}×{w} patches (each "
                f"patch's {n} pixel tokens' inner attention is not drawn)",
                name=str(b),
                title=f"block {b} of {L} (outer attention, {h}×{w} patches)",
                hover=f"block {b}",
                selector="",
            )
            for b, attn in enumerate(analysis.attentions)
        )

    def over_input(self, analysis: Any, values: np.ndarray, colormap: str, opacity: float) -> Any:
        """``values`` on the patch grid over the model input, each patch over its square."""
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
        """A ViT's words: blocks numbered from 0, the query the CLS token or a patch."""
        from dataclasses import replace

        from vitviz.explain.methods import cam_methods

        h, w = analysis.stage_grids[0]
        return replace(
            super().view_words(analysis),
            axis="block",
            head="head {head}",
            query_none="CLS token",
            query_cell="patch row {row}, col {col} (#{index})",
            title_query_none="query: CLS token",
            title_query="query patch ({row}, {col})",
            method_query_none=f"from the CLS token · over the {h}×{w} patches",
            method_query=f"from patch ({{row}}, {{col}}) · over the {h}×{w} patches",
            method_fixed=dict.fromkeys(cam_methods(), f"a block's patch tokens, {h}×{w}"),
        )


KIND = TNTKind()
