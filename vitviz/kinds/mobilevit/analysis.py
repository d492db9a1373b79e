"""analyze_mobilevit: one forward pass of a MobileViT with everything its views need.

Logits, probabilities, each transformer layer's attention (heads, P, N, N): for each of the P
pixel offsets of a p × p patch, its N patches' rows over the N patches (the pixels at that
offset), the feature grid and patch grid of each MobileViT block's stage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import Tensor

from vitviz.kinds.mobilevit.intermediates import divisible_grids
from vitviz.kinds.mobilevit.network import MobileViTNet
from vitviz.kinds.staged_analysis import (
    StagedAnalysis,
    explained_pass,
    own_model,
    pass_fields,
    prepared_input,
)


@dataclass
class MobileViTAnalysis(StagedAnalysis):
    """What one image did in a MobileViT (batch of one). Stages are counted over the MobileViT
    blocks (stage 0: the first block's)."""

    attentions: list[Tensor]  # per layer (heads, P, N, N), rows = query patches
    block_stages: list[int]  # per layer, its MobileViT block
    stage_grids: list[tuple[int, int]]  # (H_s, W_s) feature pixels per MobileViT block
    patch_grids: list[tuple[int, int]]  # (H_s / p, W_s / p) patches per MobileViT block
    stage_pixels: list[int]  # input pixels per side of a feature pixel of each block's stage
    patch: int  # p: a patch is p × p feature pixels, P = p² offsets
    kind: str = "mobilevit"

    def offset_and_patch(self, layer: int, cell: tuple[int, int]) -> tuple[int, int]:
        """(offset o, patch n) of the feature pixel of ``layer``'s stage under the centre of
        clickable cell ``cell``."""
        from vitviz.kinds.kind_methods import token_under

        s = self.block_stages[layer]
        token = token_under(self, s, cell)
        W = self.stage_grids[s][1]
        r, c = divmod(token, W)
        p = self.patch
        nw = self.patch_grids[s][1]
        return (r % p) * p + c % p, (r // p) * nw + c // p


def analyze_mobilevit(
    model_or_loaded: object, image: Any, gradients: bool = False, target_class: int | None = None
) -> MobileViTAnalysis:
    """Run a MobileViT (or a LoadedModel holding one) on ``image``: a tensor (C, H, W) or
    (1, C, H, W), or, with a LoadedModel, anything ``vitviz.imaging.load_image`` opens,
    prepared as the checkpoint's preprocessing says. ``target_class``: the class reported
    (default the top prediction); no attention gradients are taken."""
    model = own_model(model_or_loaded, MobileViTNet, "analyze_mobilevit needs a MobileViT")
    cfg = model.config
    stages = cfg.attention_stages
    first = cfg.stage_stride(stages[0])
    given = prepared_input(model_or_loaded, image, first, "analyze_mobilevit")
    x = given.x
    grids = divisible_grids(model, (int(x.shape[-2]), int(x.shape[-1])))
    out, logits, c, _ = explained_pass(model, x, False, target_class, capture_attention=True)
    if target_class is not None and logits.numel() and not 0 <= c < logits.shape[0]:
        raise ValueError(f"class {c} out of range for {logits.shape[0]} classes")
    p = cfg.patch_size
    attentions = []
    for a in out.attentions:  # (P, heads, N, N) for the one image
        attentions.append(a.detach().transpose(0, 1).contiguous())
    block_stages = [i for i, s in enumerate(stages) for _ in range(cfg.depths[s])]
    return MobileViTAnalysis(
        **pass_fields(model_or_loaded, model, given, logits, c),
        attentions=attentions,
        block_stages=block_stages,
        stage_grids=grids,
        patch_grids=[(h // p, w // p) for h, w in grids],
        stage_pixels=[cfg.stage_stride(s) for s in stages],
        patch=p,
        patch_size=first,
    )
