"""A CLIP or SigLIP image tower's intermediates (DESIGN §3): the ViT's (its tower is vitviz's
``VisionTransformer``; ``logits`` the prompts' scores, (B, 0) without prompts), with the prompt
head's kept image embedding left as the analysis set it (``rescore`` reads it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vitviz.kinds.vit.intermediates import vit_intermediates

if TYPE_CHECKING:
    from torch import Tensor, nn

    from vitviz.kindapi.intermediates import HeadReplacement, Intermediates


def clip_intermediates(
    model: nn.Module,
    x: Tensor,
    *,
    replace: HeadReplacement | None = None,
    logits_only: bool = False,
) -> Intermediates:
    head = model.head
    kept = head.__dict__.get("last_embedding")  # set by every pass of the prompt head
    try:
        return vit_intermediates(model, x, replace=replace, logits_only=logits_only)
    finally:
        if kept is None:
            head.__dict__.pop("last_embedding", None)
        else:
            head.last_embedding = kept
