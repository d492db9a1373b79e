"""The LeViT kind (Graham et al. 2021; timm's ``levit_*`` and ``levit_conv_*``): a conv stem,
stages of attention with learned per-offset biases and MLP blocks on grids that shrink, a
subsample attention between stages (queries on every other row and column, keys on the whole
finer grid), the head reading the mean token; no CLS token.

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
    )
    from vitviz.kinds.levit.analysis import LeViTAnalysis
    from vitviz.kinds.levit.config import LeViTConfig


class LeViTKind(StagedKind):
    """vitviz's LeViTNet."""

    ENGINE_DATA = "vitviz.kinds.levit.engine_data"  # its query maps and words (StagedKind)
    METHODS_MODULE = "vitviz.kinds.levit.methods"
    OWNER = "a LeViT"
    name = "levit"
    label = "LeViT"
    POOL_QUERY = "query: mean over the tokens"
    POOL_WORDS = "mean over the tokens"
    POOL_SOURCE = "the mean of the last stage's tokens"
    HEADS_TITLE = "Attention of every layer and head (a subsample's over the finer grid)"

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

    def parts(self, model: nn.Module) -> tuple[str, ...]:
        from vitviz.kinds.levit.families import levit_parts

        return levit_parts(model.config)

    @property
    def families(self) -> Sequence[Any]:
        from vitviz.kinds.levit import families, hf_family

        return (families.FAMILY, hf_family.FAMILY)

    def config_from_dict(self, data: dict[str, object]) -> LeViTConfig:
        from vitviz.kinds.levit.config import LeViTConfig

        return LeViTConfig.from_dict(data)

    def build_from_state(self, config: LeViTConfig, state: Mapping[str, Tensor]) -> nn.Module:
        import torch

        from vitviz.checkpoints.assign import assign_exactly
        from vitviz.kinds.levit.network import LeViTNet

        with torch.device("meta"):
            model = LeViTNet(config)
        return assign_exactly(model, state, "LeViT model")

    def library_outputs(self, model: nn.Module, x: Tensor) -> tuple[Tensor, list[Tensor]]:
        out = model.forward_explained(x, capture_attention=True)
        return out.logits, out.attentions  # (B, heads, N_q, N_k), as timm's layers compute

    def parameter_bounds(self, subject: Any) -> tuple[int, int]:
        """A model's attention layers and most heads; an analysis's kept layers and heads."""
        from torch import nn

        if isinstance(subject, nn.Module):
            return int(subject.config.depth), max(subject.config.layer_heads)
        return super().parameter_bounds(subject)

    def analyze(self, loaded: Loaded, image: ImageInput, **options: Any) -> LeViTAnalysis:
        from vitviz.kinds.levit.analysis import analyze_levit

        model = getattr(loaded, "model", loaded)
        gradients = bool(options.get("gradients")) and int(model.config.num_classes) > 0
        target = options.get("target_class")
        return self.keeping_blocks(loaded, lambda: analyze_levit(loaded, image, gradients, target))

    def staged_sites(self, model: nn.Module, x: Tensor) -> Any:
        """vitviz's LeViTNet's layers as its accessor reads them (None: another network)."""
        from vitviz.kinds.levit.intermediates import levit_sites

        return levit_sites(model)

    def token_geometry(self, analysis: LeViTAnalysis) -> TokenGeometry:
        layers = tuple(
            LayerGrid(grid=tuple(analysis.stage_grids[s]), token_pixels=analysis.stage_pixels[s])
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
        """Layers on their grids, heads before the projection, row-major (DESIGN §3)."""
        from vitviz.kinds.levit.intermediates import levit_intermediates

        return levit_intermediates(model, x, replace, logits_only)

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

    def tokens_on_grid(
        self, model: nn.Module, x: Tensor, layer: LayerChoice
    ) -> Callable[[Tensor, tuple[int, int]], Tensor]:
        """A layer's tokens row-major on its grid (DESIGN §5)."""
        from vitviz.kinds.levit.intermediates import levit_tokens_on_grid

        return levit_tokens_on_grid(model, x, layer)

    def head_statistics(self, analysis: LeViTAnalysis) -> dict[str, np.ndarray]:
        from vitviz.kinds.levit.stats import head_statistics

        return head_statistics(analysis)

    def npz_arrays(self, analysis: LeViTAnalysis) -> dict[str, np.ndarray]:
        from vitviz.kinds.levit.export import levit_arrays

        return levit_arrays(analysis)

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
            rows.append(
                LayerRow(
                    name,
                    int(attn.shape[0]),
                    tooltip=f"layer {name}: {what} {H}×{W} tokens, keys {kh}×{kw}",
                    name=name,
                    title=f"layer {name} ({H}×{W} queries, {kh}×{kw} keys)",
                    hover=f"layer {name}",
                    selector=f" · {name}",
                )
            )
        return tuple(rows)

    # -- engine and window ---------------------------------------------------------------------


KIND = LeViTKind()
