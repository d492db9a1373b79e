"""The PiT kind (Pooling-based Vision Transformer, Heo et al. 2021; timm's ``pit_*``): a CLS
token (and a distillation token) through stages whose patch grids shrink, each stage's blocks
attending over [prefix, its grid], a depthwise strided conv and a Linear pooling between them.

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
    from vitviz.kinds.pit.analysis import PiTAnalysis
    from vitviz.kinds.pit.config import PiTConfig


class PiTKind(StagedKind):
    """vitviz's PiTViT."""

    ENGINE_DATA = "vitviz.kinds.pit.engine_data"  # its query maps and words (StagedKind)
    METHODS_MODULE = "vitviz.kinds.pit.methods"
    OWNER = "a PiT"
    name = "pit"
    label = "PiT (pooling-based ViT)"
    POOL_QUERY = "query: CLS token"
    POOL_SOURCE = "the CLS token"
    HEADS_TITLE = "Attention of every block and head, each on its stage's grid"

    def architecture(self, model: nn.Module) -> str:
        cfg = model.config
        tokens = ", distilled" if cfg.num_tokens == 2 else ""
        return (
            f"PiT, widths {'-'.join(map(str, cfg.dims))}, depths "
            f"{'-'.join(map(str, cfg.depths))}, heads {'-'.join(map(str, cfg.heads))}, stem "
            f"{cfg.patch_size}/{cfg.stride}{tokens}"
        )

    def parts(self, model: nn.Module) -> tuple[str, ...]:
        from vitviz.kinds.pit.families import pit_parts

        return pit_parts(model.config)

    @property
    def families(self) -> Sequence[Any]:
        from vitviz.kinds.pit.families import FAMILY

        return (FAMILY,)

    def config_from_dict(self, data: dict[str, object]) -> PiTConfig:
        from vitviz.kinds.pit.config import PiTConfig

        return PiTConfig.from_dict(data)

    def build_from_state(self, config: PiTConfig, state: Mapping[str, Tensor]) -> nn.Module:
        import torch

        from vitviz.checkpoints.assign import assign_exactly
        from vitviz.kinds.pit.network import PiTViT

        with torch.device("meta"):
            model = PiTViT(config)
        return assign_exactly(model, state, "PiT model")

    def library_outputs(self, model: nn.Module, x: Tensor) -> tuple[Tensor, list[Tensor]]:
        out = model.forward_explained(x, capture_attention=True)
        return out.logits, out.attentions  # (B, heads, P + N_s, P + N_s), as timm's blocks

    def analyze(self, loaded: Loaded, image: ImageInput, **options: Any) -> PiTAnalysis:
        from vitviz.kinds.pit.analysis import analyze_pit

        model = getattr(loaded, "model", loaded)
        gradients = bool(options.get("gradients")) and int(model.config.num_classes) > 0
        target = options.get("target_class")
        return self.keeping_blocks(loaded, lambda: analyze_pit(loaded, image, gradients, target))

    def staged_sites(self, model: nn.Module, x: Tensor) -> Any:
        """vitviz's PiTViT's blocks as its accessor reads them (None: another network)."""
        from vitviz.kinds.pit.intermediates import PiTSites
        from vitviz.kinds.pit.network import PiTViT

        return PiTSites(model) if isinstance(model, PiTViT) else None

    def kept_with_prefix(self, sites: Any, kept: Any) -> Any:
        """The CLS (and distillation) token each block carried, as the accessor gives them."""
        import dataclasses

        prefixes = tuple(p.detach() for p in sites.prefixes if p is not None)
        if len(prefixes) != len(kept.blocks):
            return None
        return dataclasses.replace(kept, block_prefix=prefixes)

    def token_geometry(self, analysis: PiTAnalysis) -> TokenGeometry:
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
        """Blocks on their grids with their prefix, heads before the projection (DESIGN §3)."""
        from vitviz.kinds.pit.intermediates import pit_intermediates

        return pit_intermediates(model, x, replace, logits_only)

    def readout(self, model: nn.Module) -> Readout:
        """The final norm on the prefix tokens and the head(s) (DESIGN §5): a block's own
        prefix tokens read as the network reads its last stage's."""
        from vitviz.kindapi.intermediates import Readout

        prefix_count = int(model.config.num_tokens)

        def logits(prefix: Tensor, patches: Tensor) -> Tensor:
            if prefix.shape[1] != prefix_count:
                raise ValueError(f"a block of this PiT has {prefix_count} prefix tokens")
            return model.forward_head(model.norm(prefix))

        return Readout(model.norm, logits, int(model.config.dims[-1]))

    def tokens_on_grid(
        self, model: nn.Module, x: Tensor, layer: LayerChoice
    ) -> Callable[[Tensor, tuple[int, int]], Tensor]:
        """A block's tokens, its norms' too, row-major on its grid, the prefix left out."""
        from vitviz.kinds.pit.intermediates import pit_tokens_on_grid

        return pit_tokens_on_grid(model, x, layer)

    def head_statistics(self, analysis: PiTAnalysis) -> dict[str, np.ndarray]:
        from vitviz.kinds.pit.stats import head_statistics

        return head_statistics(analysis)

    def npz_arrays(self, analysis: PiTAnalysis) -> dict[str, np.ndarray]:
        from vitviz.kinds.pit.export import pit_arrays

        return pit_arrays(analysis)

    def layer_rows(self, analysis: PiTAnalysis) -> tuple[LayerRow, ...]:
        rows = []
        P = analysis.num_prefix_tokens
        prefix = "CLS and distillation tokens" if P == 2 else "the CLS"
        for attn, s, name in zip(
            analysis.attentions,
            analysis.block_stages,
            self.block_names(analysis.block_stages),
            strict=True,
        ):
            H, W = analysis.stage_grids[s]
            rows.append(
                LayerRow(
                    name,
                    int(attn.shape[0]),
                    tooltip=f"block {name}: {prefix} and {H}×{W} patches attend to each other",
                    name=name,
                    title=f"block {name} ({H}×{W} patches + {P} prefix)",
                    hover=f"block {name}",
                    selector=f" · {name}",
                )
            )
        return tuple(rows)

    def over_input(self, analysis: Any, values: np.ndarray, colormap: str, opacity: float) -> Any:
        """``values`` over the model input as the window draws it: each first-stage cell over
        its stride's square from the top left, the margin the stem's grid leaves (its last
        token reads it, but no cell is drawn there) uncoloured."""
        import numpy as np
        import torch

        from vitviz.imaging.overlay import overlay_on_image

        geometry = self.token_geometry(analysis)
        fine = geometry.on_grid(torch.as_tensor(np.asarray(values))).numpy()
        H, W = geometry.input_size
        p, (gh, gw) = geometry.cell_pixels, geometry.grid
        rows, cols = np.arange(H) // p, np.arange(W) // p
        pixels = np.full((H, W), np.nan, dtype=np.float32)
        inside = (rows < gh)[:, None] & (cols < gw)[None, :]
        pixels[inside] = fine[np.minimum(rows, gh - 1)][:, np.minimum(cols, gw - 1)][inside]
        return overlay_on_image(analysis.pixels, pixels, colormap=colormap, opacity=opacity)

    # -- engine and window ---------------------------------------------------------------------
    def view_words(self, analysis: Any) -> ViewWords:
        """The staged kinds' words, the query without a clicked cell being the CLS token."""
        from dataclasses import replace

        return replace(super().view_words(analysis), query_none="CLS token")


KIND = PiTKind()
