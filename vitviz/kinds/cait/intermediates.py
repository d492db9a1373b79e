"""The CaiT's intermediates (DESIGN §3), read by the ViT kind's token-layout accessor
(``vitviz.kinds.vit.intermediates``) on its two kinds of block:

- a self-attention block attends over the patches alone (the CLS is not in it yet: vitviz's
  network carries it along unchanged, timm's inserts it later): its output is the patches on
  the grid with no prefix token, as timm's ``forward_intermediates``; its heads (B, H, P, hd)
  are over the patches (``LayerGrid`` with no prefix token);
- a class-attention block updates the CLS alone: its output is the new CLS (``block_prefix``,
  (B, 1, C)) and the patches it passes on unchanged (on the grid); its heads are the CLS's
  query only, (B, H, 1, hd) (``LayerGrid`` of one prefix token and a 0 × 0 grid).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vitviz.kinds.vit.intermediates import BlockSite, HeadSite, read_patch_model

if TYPE_CHECKING:
    from torch import Tensor, nn

    from vitviz.kindapi.intermediates import HeadReplacement, Intermediates


def cait_intermediates(
    model: nn.Module,
    x: Tensor,
    *,
    replace: HeadReplacement | None = None,
    logits_only: bool = False,
) -> Intermediates:
    """A ``CaitModel``'s blocks (self-attention, then class attention) and heads, in its
    layers' order."""
    S = int(model.config.self_depth)
    blocks = [BlockSite(b, 0, skip=1) if i < S else BlockSite(b, 1) for i, b in
              enumerate(model.blocks)]  # fmt: skip
    heads = [
        HeadSite(b.attn.proj, b.attn.heads, 0) if i < S
        else HeadSite(b.attn.proj, b.attn.heads, 1, patches=False)
        for i, b in enumerate(model.blocks)
    ]  # fmt: skip
    return read_patch_model(model, x, blocks, heads, replace, logits_only)
