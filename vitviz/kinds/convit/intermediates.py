"""The ConViT's intermediates (DESIGN §3), read by the ViT kind's token-layout accessor
(``vitviz.kinds.vit.intermediates``) on its two kinds of block:

- a GPSA block attends over the patches alone (the CLS is not in it yet: vitviz's network
  carries it along unchanged, timm's inserts it later): its output is the patches on the grid
  with no prefix token; its heads (B, H, P, hd) are over the patches;
- a plain block attends over [CLS, patches]: its output and heads have the CLS as their one
  prefix token.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vitviz.kinds.vit.intermediates import BlockSite, HeadSite, read_patch_model

if TYPE_CHECKING:
    from torch import Tensor, nn

    from vitviz.kindapi.intermediates import HeadReplacement, Intermediates


def convit_intermediates(
    model: nn.Module,
    x: Tensor,
    *,
    replace: HeadReplacement | None = None,
    logits_only: bool = False,
) -> Intermediates:
    """A ``ConvitModel``'s blocks (GPSA, then plain) and heads, in its layers' order."""
    S = int(model.config.gpsa_depth)
    blocks = [BlockSite(b, 0, skip=1) if i < S else BlockSite(b, 1) for i, b in
              enumerate(model.blocks)]  # fmt: skip
    heads = [HeadSite(b.attn.proj, b.attn.heads, 0 if i < S else 1) for i, b in
             enumerate(model.blocks)]  # fmt: skip
    return read_patch_model(model, x, blocks, heads, replace, logits_only)
