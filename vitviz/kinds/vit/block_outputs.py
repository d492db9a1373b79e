"""A token-layout analysis's own block outputs as the intermediates accessor lays them out
(DESIGN §5): the capture pass kept every block's tokens, so the feature views read them
instead of running the network again."""

from __future__ import annotations

from typing import Any

from vitviz.kindapi.grids import LayerGrid
from vitviz.kindapi.intermediates import BlockOutputs


def vit_analysis_blocks(analysis: Any) -> BlockOutputs | None:
    """``analysis``'s kept block outputs, each (N, D) = [prefix, patches row-major], as
    ``vit_intermediates`` gives them for its input (batch of one): ``blocks`` (1, D, gh, gw),
    ``block_prefix`` (1, P, D), ``logits`` (1, classes) on their device. None without them,
    or for a model the accessor can't read (model code: its pass refuses it too)."""
    from vitviz.blocks import VisionTransformer

    hidden = tuple(getattr(analysis, "block_outputs", ()))
    loaded = getattr(analysis, "loaded", None)
    if not hidden or not isinstance(getattr(loaded, "model", None), VisionTransformer):
        return None
    prefix = int(analysis.num_prefix_tokens)
    gh, gw = (int(n) for n in analysis.grid)
    return BlockOutputs(
        logits=analysis.logits[None].to(hidden[0].device),
        blocks=tuple(h[None, prefix:].transpose(1, 2).unflatten(-1, (gh, gw)) for h in hidden),
        block_prefix=tuple(h[None, :prefix] for h in hidden),
        block_grids=tuple(LayerGrid((gh, gw), int(analysis.patch_size), prefix) for _ in hidden),
    )
