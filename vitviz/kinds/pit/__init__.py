"""The PiT kind (Pooling-based Vision Transformer, Heo et al. 2021; timm's ``pit_*``): a CLS
token (and a distillation token) through stages whose patch grids shrink, each stage's blocks
attending over [prefix, its grid], a depthwise strided conv and a Linear pooling between them.

``KIND`` is what ``vitviz.kinds`` registers; the network, its checkpoint family, its analysis
and its versions of the table's methods are the modules beside this one. vitviz does not train
one (``training`` is None: the Training tab does not offer it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vitviz.kinds.staged import StagedKind

if TYPE_CHECKING:
    import numpy as np
    from torch import Tensor, nn

    from vitviz.kindapi.intermediates import Readout
    from vitviz.kindapi.protocol import LayerRow, ViewWords
    from vitviz.kinds.pit.analysis import PiTAnalysis


class PiTKind(StagedKind):
    """vitviz's PiTViT."""

    ENGINE_DATA = "vitviz.kinds.pit.engine_data"  # its query maps and words (StagedKind)
    METHODS_MODULE = "vitviz.kinds.pit.methods"
    CONFIG = "vitviz.kinds.pit.config:PiTConfig"
    NETWORK = "vitviz.kinds.pit.network:PiTViT"
    FAMILIES = ("vitviz.kinds.pit.families:FAMILY",)
    PARTS = "vitviz.kinds.pit.families:pit_parts"
    ANALYZE = "vitviz.kinds.pit.analysis:analyze_pit"
    SITES = "vitviz.kinds.pit.intermediates:PiTSites"
    # blocks on their grids with their prefix, heads before the projection (DESIGN §3); a
    # block's tokens on its grid, the prefix left out
    INTERMEDIATES = "vitviz.kinds.pit.intermediates:pit_intermediates"
    TOKENS_ON_GRID = "vitviz.kinds.pit.intermediates:pit_tokens_on_grid"
    HEAD_STATISTICS = "vitviz.kinds.pit.stats:head_statistics"
    NPZ_ARRAYS = "vitviz.kinds.pit.export:pit_arrays"
    OWNER = "a PiT"
    name = "pit"
    label = "PiT (pooling-based ViT)"
    POOL_QUERY = "query: CLS token"
    POOL_SOURCE = "the CLS token"
    HEADS_TITLE = "Attention of every block and head, each on its stage's grid"

    def input_stride(self, model: nn.Module) -> int:
        """The stem's stride, the grid its analysis prepares inputs in multiples of."""
        cfg = model.config
        return int(cfg.stride)

    def architecture(self, model: nn.Module) -> str:
        cfg = model.config
        tokens = ", distilled" if cfg.num_tokens == 2 else ""
        return (
            f"PiT, widths {'-'.join(map(str, cfg.dims))}, depths "
            f"{'-'.join(map(str, cfg.depths))}, heads {'-'.join(map(str, cfg.heads))}, stem "
            f"{cfg.patch_size}/{cfg.stride}{tokens}"
        )

    def carries_prefix(self, sites: Any) -> bool:
        """The CLS (and distillation) token each block carried."""
        return True

    def layer_prefix(self, analysis: PiTAnalysis, layer: int) -> int:
        return analysis.num_prefix_tokens

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
            tip = f"block {name}: {prefix} and {H}×{W} patches attend to each other"
            title = f"block {name} ({H}×{W} patches + {P} prefix)"
            rows.append(self.named_row(name, int(attn.shape[0]), tip, title, "block"))
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
