"""analyze_levit: one forward pass of a LeViT with everything its explanations need.

Logits, probabilities, each attention layer's probabilities (heads, N_q, N_k) (a subsample's
queries on its stage's grid, its keys on the stage before's), the stage grids, and on request
∂y_c/∂A_b for every layer (same shapes, each paired with its own layer).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from vitviz.kinds.levit.network import LeViTNet
from vitviz.kinds.levit.rollout import LeViTRollout
from vitviz.kinds.staged_analysis import (
    StagedAnalysis,
    explained_pass,
    method_matrices,
    own_model,
    pass_fields,
    prepared_input,
)


@dataclass
class LeViTAnalysis(StagedAnalysis):
    """What one image did in a LeViT (batch of one)."""

    attentions: list[Tensor]  # per layer (heads, N_q, N_k), rows = queries
    block_stages: list[int]  # per layer: its queries' stage
    key_stages: list[int]  # per layer: its keys' stage (a subsample's: the stage before)
    stage_grids: list[tuple[int, int]]  # (h_s, w_s) per stage
    stage_pixels: list[int]  # input pixels per side of a token of each stage
    kind: str = "levit"

    _prepared: dict[tuple, LeViTRollout] = field(default_factory=dict, repr=False)

    @property
    def subsample(self) -> list[bool]:
        """Per layer: whether it is a subsample (queries and keys on different grids)."""
        return [q != k for q, k in zip(self.block_stages, self.key_stages, strict=True)]

    def prepared(self, method: str, fusion: str = "mean") -> LeViTRollout:
        """The per-layer matrices of ``method`` (rollout, gradient-rollout, relevance)."""
        key = (method, fusion)
        if key not in self._prepared:
            mats, mode = method_matrices(self.attentions, self.gradients, method, fusion)
            self._prepared[key] = LeViTRollout(mats, self.subsample, self.stage_grids, mode)
        return self._prepared[key]


def analyze_levit(
    model_or_loaded: object,
    image: Any,
    gradients: bool = False,
    target_class: int | None = None,
) -> LeViTAnalysis:
    """Run a LeViT (or a LoadedModel holding one) on ``image``: a normalised tensor (C, H, W) or
    (1, C, H, W), or, with a LoadedModel, anything ``vitviz.imaging.load_image`` opens, prepared
    as the checkpoint's preprocessing says. ``target_class``: the class y_c whose gradients are
    taken (default the top prediction)."""
    model = own_model(model_or_loaded, LeViTNet, "analyze_levit needs a LeViT")
    cfg = model.config
    given = prepared_input(model_or_loaded, image, cfg.stem_stride, "analyze_levit")
    x = given.x
    out, logits, c, grads = explained_pass(
        model, x, gradients, target_class, capture_attention=True
    )
    stages = list(out.layer_stages)
    subsample_starts = {s for s in stages if s > 0}
    firsts = [stages.index(s) for s in subsample_starts]
    keys = [s - 1 if b in firsts else s for b, s in enumerate(stages)]
    return LeViTAnalysis(
        **pass_fields(model_or_loaded, model, given, logits, c),
        attentions=[a[0].detach() for a in out.attentions],
        block_stages=stages,
        key_stages=keys,
        stage_grids=[tuple(g) for g in out.stage_grids],
        stage_pixels=[cfg.stage_stride(s) for s in range(cfg.num_stages)],
        gradients=grads,
        patch_size=int(cfg.stem_stride),
    )
