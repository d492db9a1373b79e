"""``LateClsNetwork``: the network of the kinds whose CLS token joins after their first blocks
(CaiT, ConViT), all but its blocks: a patch embedding and a learnt position table over the
patches, a CLS token, one list of blocks (the subclass's ``make_blocks``: layer l of the analysis
is ``blocks[l]``), a final LayerNorm and a linear head on the CLS.

Every block takes and gives [CLS, patches] (B, 1 + P, D) and hands its attention over in the
one layout (B, H, 1 + P, 1 + P); a block before the CLS joins passes it unchanged (its captured
CLS row the identity), so the ViT's ``run_blocks`` runs them all.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from vitviz.blocks.fresh_weights import init_linears, shapes_only
from vitviz.blocks.layers import PatchEmbed
from vitviz.blocks.posembed import resample_grid_embedding
from vitviz.blocks.vit import ViTOutput, run_blocks


class LateClsNetwork(nn.Module):
    """[CLS, patches + positions] through ``make_blocks(config)``, then head(norm(·)[:, 0])."""

    def __init__(self, config: Any) -> None:
        super().__init__()
        config.validate()
        self.config = config
        D = config.dim
        self.patch_embed = PatchEmbed(config)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, D))
        self.pos_embed = nn.Parameter(torch.zeros(1, config.num_patches, D))
        self.pos_drop = nn.Dropout(config.drop_rate)
        self.blocks = nn.ModuleList(self.make_blocks(config))
        self.norm = nn.LayerNorm(D, eps=config.norm_eps)
        self.head_drop = nn.Dropout(config.drop_rate)
        C = config.num_classes
        self.head = nn.Linear(D, C) if C else nn.Identity()
        self.init_weights()

    def make_blocks(self, config: Any) -> list[nn.Module]:
        """The blocks, in the order they run (made where the network makes them, between the
        position table and the final norm)."""
        raise NotImplementedError

    def init_weights(self) -> None:
        """Truncated-normal (std 0.02) Linear weights, position table and CLS, zero biases."""
        if shapes_only(self):
            return
        init_linears(self)
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)

    @property
    def num_prefix_tokens(self) -> int:
        return 1

    def embed(self, x: Tensor) -> tuple[Tensor, tuple[int, int]]:
        """(B, C, H, W) -> (B, 1 + P, D) [CLS, patches + positions], and the grid. The position
        table is resampled (vitviz's bicubic) for a grid other than the trained one (timm's
        CaiT takes only its trained size)."""
        patches, grid = self.patch_embed(x)
        pos = resample_grid_embedding(
            self.pos_embed, self.config.grid_size, grid, method=self.config.pos_embed_interp
        )
        patches = self.pos_drop(patches + pos)
        cls = self.cls_token.expand(patches.shape[0], -1, -1)
        return torch.cat([cls, patches], dim=1), grid

    def forward_explained(
        self,
        x: Tensor,
        capture_attention: bool = True,
        hidden_states: bool = False,
        attention_sink: Callable[[int, Tensor], None] | None = None,
        recompute_blocks: bool = False,
    ) -> ViTOutput:
        """Logits (B, C) and each layer's embedded attention L × (B, H, 1 + P, 1 + P) (or handed
        to ``attention_sink(layer, attn)``), block outputs L × (B, 1 + P, D) when asked.
        ``recompute_blocks``: each block is run again in the backward pass."""
        tokens, grid = self.embed(x)
        tokens, attentions, hidden = run_blocks(
            self.blocks, tokens, capture_attention, hidden_states, attention_sink, recompute_blocks
        )
        logits = self.head(self.head_drop(self.norm(tokens)[:, 0]))
        return ViTOutput(logits, attentions, hidden, grid, 1)

    def forward(self, x: Tensor) -> Tensor:
        """(B, C, H, W) -> (B, classes) logits."""
        return self.forward_explained(x, capture_attention=False).logits
