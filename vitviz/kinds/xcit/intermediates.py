"""The XCiT's intermediates (DESIGN §3), read by the ViT kind's token-layout accessor
(``vitviz.kinds.vit.intermediates``):

- ``blocks``: the XCA blocks (the patches on the grid, no prefix token, as timm's
  ``forward_intermediates``), then the class-attention blocks ([CLS, patches]: both change,
  the patches by their own normalised value);
- ``heads``: the class-attention layers only, the rows of the window's head grid
  (``layer_rows``: "CA 0", …), each the CLS's query, (B, H, 1, hd). The XCA blocks' heads
  (per head a d × d attention between channels, whose output is still (B, P, d) per head
  before the projection) are no rows of the head grid, so they are not among ``heads``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vitviz.kinds.vit.intermediates import BlockSite, HeadSite, read_patch_model

if TYPE_CHECKING:
    from torch import Tensor, nn

    from vitviz.kindapi.intermediates import HeadReplacement, Intermediates


def xcit_intermediates(
    model: nn.Module,
    x: Tensor,
    *,
    replace: HeadReplacement | None = None,
    logits_only: bool = False,
) -> Intermediates:
    """An ``XcitModel``'s blocks (XCA, then class attention) and class-attention heads."""
    blocks = [BlockSite(b, 0) for b in model.xca_blocks] + [BlockSite(b, 1) for b in model.blocks]
    heads = [HeadSite(b.attn.proj, b.attn.heads, 1, patches=False) for b in model.blocks]
    return read_patch_model(model, x, blocks, heads, replace, logits_only)
