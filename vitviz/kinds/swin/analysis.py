"""analyze_swin: one forward pass of a Swin with everything its explanations need.

Logits, probabilities, each block's captured window attention (windows, heads, n, n) with its
layout, and on request ∂y_c/∂A_b for every block (same shapes, each paired with its own block).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from vitviz.kinds.staged_analysis import StagedAnalysis, pass_fields, prepared_input
from vitviz.kinds.swin.network import SwinTransformer
from vitviz.kinds.swin.rollout import PreparedSwinRollout, fused_blocks, gradient_blocks
from vitviz.kinds.swin.windows import WindowLayout


@dataclass
class SwinAnalysis(StagedAnalysis):
    """What one image did in a Swin (batch of one)."""

    attentions: list[Tensor]  # per block (windows, heads, n, n), rows = queries
    layouts: list[WindowLayout]  # per block
    block_stages: list[int]  # per block
    stage_grids: list[tuple[int, int]]  # (H_s, W_s) per stage
    kind: str = "swin"  # the model kind (vitviz.kinds)

    _prepared: dict[tuple, PreparedSwinRollout] = field(default_factory=dict, repr=False)

    def prepared_rollout(
        self, fusion: str = "mean", heads: list[int] | None = None
    ) -> PreparedSwinRollout:
        """The windowed rollout's per-block matrices for these settings (built once)."""
        key = ("rollout", fusion, None if heads is None else tuple(heads))
        if key not in self._prepared:
            mats = fused_blocks(self.attentions, self.layouts, fusion, heads)
            self._prepared[key] = self._prepare(mats)
        return self._prepared[key]

    def prepared_gradient_rollout(self) -> PreparedSwinRollout:
        """The gradient rollout's per-block matrices (needs ``gradients``; built once)."""
        if self.gradients is None:
            raise ValueError("gradient rollout needs the analysis run with gradients=True")
        key = ("gradient-rollout",)
        if key not in self._prepared:
            mats = gradient_blocks(self.attentions, self.gradients, self.layouts)
            self._prepared[key] = self._prepare(mats)
        return self._prepared[key]

    def _prepare(self, matrices: list[Tensor]) -> PreparedSwinRollout:
        return PreparedSwinRollout(matrices, self.layouts, self.block_stages, self.stage_grids)

    def rollout(
        self,
        fusion: str = "mean",
        heads: list[int] | None = None,
        query: int | None = None,
        query_stage: int | None = None,
    ) -> Tensor:
        """Windowed rollout map over the first stage's grid (H_0, W_0), scaled to max 1, from
        the uniform row over the last stage's tokens or from token ``query`` of stage
        ``query_stage`` (default the last)."""
        return self.prepared_rollout(fusion, heads).map(query, query_stage)

    def gradient_rollout(self, query: int | None = None, query_stage: int | None = None) -> Tensor:
        """Windowed gradient rollout map (H_0, W_0), scaled to max 1 (needs ``gradients``)."""
        return self.prepared_gradient_rollout().map(query, query_stage)


def _model(model_or_loaded: object) -> SwinTransformer:
    """vitviz's SwinTransformer, or any module of kind "swin" with ``forward_explained``
    giving SwinOutput and ``config.patch_size`` (a model-code Swin)."""
    model = getattr(model_or_loaded, "model", model_or_loaded)
    swin_kind = getattr(model, "model_kind", None) == "swin" and hasattr(model, "forward_explained")
    if not (isinstance(model, SwinTransformer) or swin_kind):
        raise TypeError(f"analyze_swin needs a Swin model, got {type(model).__name__}")
    return model  # type: ignore[return-value]


def analyze_swin(
    model_or_loaded: object,
    image: Any,
    gradients: bool = False,
    target_class: int | None = None,
) -> SwinAnalysis:
    """Run a Swin (or a LoadedModel holding one) on ``image``: a normalised tensor (C, H, W) or
    (1, C, H, W), or, with a LoadedModel, anything ``vitviz.imaging.load_image`` opens (path,
    bytes, PIL image), prepared as the checkpoint's preprocessing says.

    ``target_class``: the class y_c whose gradients are taken (default the top prediction).
    """
    model = _model(model_or_loaded)
    given = prepared_input(model_or_loaded, image, model.config.patch_size, "analyze_swin")
    x = given.x
    with torch.set_grad_enabled(gradients):
        if gradients:
            x = x.detach().requires_grad_(True)  # attention joins the graph
        out = model.forward_explained(x, capture_attention=True)
        logits = out.logits[0]
        c = int(logits.argmax()) if target_class is None else int(target_class)
        if not 0 <= c < logits.shape[0]:
            raise ValueError(f"class {c} out of range for {logits.shape[0]} classes")
        grads = None
        if gradients:
            grads = [g[0] for g in torch.autograd.grad(logits[c], out.attentions)]
    return SwinAnalysis(
        **pass_fields(model_or_loaded, model, given, logits, c),
        attentions=[a[0].detach() for a in out.attentions],
        layouts=out.layouts,
        block_stages=out.block_stages,
        stage_grids=out.stage_grids,
        gradients=grads,
        patch_size=int(model.config.patch_size),
    )
