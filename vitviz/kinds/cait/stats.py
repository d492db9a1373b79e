"""A CaiT's head statistics, layer by layer, as they mean something (DESIGN §5's are over the
patch queries):

- self-attention layers (patches only, talking heads): mean attention distance over the patch
  queries (the captured weights as they are); entropy NaN (a talking-heads matrix is no
  probability distribution: entries can be negative); prefix share NaN (no prefix token there);
- class-attention layers (only the CLS queries): distance NaN (the CLS has no position);
  entropy of the CLS's row over [CLS, patches] (nats); prefix share = the CLS's attention to
  itself.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def class_layer_statistics(
    attention: Tensor,
    layers: Sequence[int],
    self_depth: int,
    distance: Tensor,
    entropy: Tensor,
    prefix: Tensor,
) -> tuple[Tensor, Tensor, Tensor]:
    """``attention`` (K, H, N, N) of model layers ``layers``; the (K, H) statistics as the ViT's
    analysis made them -> (distance, entropy, prefix share) (K, H) float32 as above."""
    distance, entropy, prefix = distance.clone(), entropy.clone(), prefix.clone()
    nan = float("nan")
    for row, layer in enumerate(layers):
        if layer < self_depth:
            entropy[row] = nan
            prefix[row] = nan
            continue
        cls = attention[row, :, 0, :].double()  # (H, N) the CLS's row
        tiny = torch.finfo(torch.float64).tiny
        entropy[row] = (-(cls * (cls + tiny).log()).sum(dim=-1)).to(entropy).cpu()
        prefix[row] = cls[:, 0].to(prefix).cpu()
        distance[row] = nan
    return distance, entropy, prefix
