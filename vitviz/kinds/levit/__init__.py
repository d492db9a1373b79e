"""The LeViT kind (Graham et al. 2021; timm's ``levit_*`` and ``levit_conv_*``): a conv stem,
stages of attention with learned per-offset biases and MLP blocks on grids that shrink, a
subsample attention between stages (queries on every other row and column, keys on the whole
finer grid), the head reading the mean token; no CLS token.

``KIND`` is what ``vitviz.kinds`` registers; the network, its checkpoint family, its analysis
and its versions of the table's methods are the modules beside this one. vitviz does not train
one (``training`` is None: the Training tab does not offer it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vitviz.kinds.staged import StagedKind

if TYPE_CHECKING:
    from torch import Tensor, nn

    from vitviz.kindapi.intermediates import Readout
    from vitviz.kindapi.protocol import LayerRow
    from vitviz.kinds.levit.analysis import LeViTAnalysis


class LeViTKind(StagedKind):
    """vitviz's LeViTNet."""

    ENGINE_DATA = "vitviz.kinds.levit.engine_data"  # its query maps and words (StagedKind)
    METHODS_MODULE = "vitviz.kinds.levit.methods"
    CONFIG = "vitviz.kinds.levit.config:LeViTConfig"
    NETWORK = "vitviz.kinds.levit.network:LeViTNet"
    FAMILIES = ("vitviz.kinds.levit.families:FAMILY", "vitviz.kinds.levit.hf_family:FAMILY")
    PARTS = "vitviz.kinds.levit.families:levit_parts"
    ANALYZE = "vitviz.kinds.levit.analysis:analyze_levit"
    SITES = "vitviz.kinds.levit.intermediates:LeViTSites"
    # layers on their grids, heads before the projection, row-major (DESIGN §3)
    INTERMEDIATES = "vitviz.kinds.levit.intermediates:levit_intermediates"
    TOKENS_ON_GRID = "vitviz.kinds.levit.intermediates:levit_tokens_on_grid"
    HEAD_STATISTICS = "vitviz.kinds.levit.stats:head_statistics"
    NPZ_ARRAYS = "vitviz.kinds.levit.export:levit_arrays"
    OWNER = "a LeViT"
    name = "levit"
    label = "LeViT"
    POOL_QUERY = "query: mean over the tokens"
    POOL_WORDS = "mean over the tokens"
    POOL_SOURCE = "the mean of the last stage's tokens"
    HEADS_TITLE = "Attention of every layer and head (a subsample's over the finer grid)"

    def input_stride(self, model: nn.Module) -> int:
        """The stem's stride, the grid its analysis prepares inputs in multiples of."""
        cfg = model.config
        return int(cfg.stem_stride)

    def architecture(self, model: nn.Module) -> str:
        cfg = model.config
        extra = "".join(
            (
                ", distilled" if cfg.distilled else "",
                ", SiLU" if cfg.activation == "silu" else "",
                ", conv layout" if cfg.conv else "",
            )
        )
        return (
            f"LeViT, widths {'-'.join(map(str, cfg.dims))}, depths "
            f"{'-'.join(map(str, cfg.depths))}, heads {'-'.join(map(str, cfg.heads))}, key "
            f"width {cfg.key_dim}, stem stride {cfg.stem_stride}{extra}"
        )

    def model_heads(self, config: Any) -> list[int]:
        """Each attention layer's heads (a subsample's differ from its stage's)."""
        return config.layer_heads

    def readout(self, model: nn.Module) -> Readout:
        """The head on the mean token (DESIGN §5): no per-token final norm (the head's
        BatchNorm reads the mean token, as the network's)."""
        from vitviz.kindapi.intermediates import Readout

        def logits(prefix: Tensor, patches: Tensor) -> Tensor:
            return model.forward_head(patches.mean(dim=1))

        return Readout(lambda t: t, logits, int(model.config.dims[-1]))

    def default_cam_part(self, model: nn.Module) -> str:
        """A LeViT's blocks have no norms: the CAM family reads the last block's output."""
        return "output"

    def layer_rows(self, analysis: LeViTAnalysis) -> tuple[LayerRow, ...]:
        rows = []
        for attn, s, k, name in zip(
            analysis.attentions,
            analysis.block_stages,
            analysis.key_stages,
            self.block_names(analysis.block_stages),
            strict=True,
        ):
            H, W = analysis.stage_grids[s]
            kh, kw = analysis.stage_grids[k]
            what = "subsample: queries" if s != k else "queries"
            tip = f"layer {name}: {what} {H}×{W} tokens, keys {kh}×{kw}"
            title = f"layer {name} ({H}×{W} queries, {kh}×{kw} keys)"
            rows.append(self.named_row(name, int(attn.shape[0]), tip, title, "layer"))
        return tuple(rows)


KIND = LeViTKind()
