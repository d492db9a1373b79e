"""VisionTransformer: the one ViT that every checkpoint family is converted into (DESIGN §3)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vitviz.blocks.attention_pool import AttentionPool
from vitviz.blocks.branches import BranchedBlock
from vitviz.blocks.config import ViTConfig
from vitviz.blocks.fresh_weights import drop_path_rates, init_linears, shapes_only
from vitviz.blocks.layers import Block, PatchEmbed
from vitviz.blocks.norms import make_norm
from vitviz.blocks.parallel import ParallelBlock
from vitviz.blocks.posembed import resample_grid_embedding, sincos_1d, sincos_2d
from vitviz.blocks.position_bias import shared_position_bias
from vitviz.blocks.recompute import recomputed
from vitviz.blocks.rotary import Rotary
from vitviz.blocks.stems import HybridEmbed


@dataclass
class ViTOutput:
    """Everything one forward pass can report.

    Token layout: [CLS, (dist), (registers...), patches row-major over the gh × gw grid].
    """

    logits: Tensor  # (B, C); the pooled features (B, D) when the model has no head
    attentions: list[Tensor]  # L × (B, heads, N, N) post-softmax, rows = queries; [] if not asked
    hidden_states: list[Tensor]  # L × (B, N, D) output of each block; [] if not asked
    grid: tuple[int, int]  # (gh, gw)
    num_prefix_tokens: int


def run_blocks(
    blocks: Iterable[nn.Module],
    tokens: Tensor,
    capture_attention: bool,
    hidden_states: bool,
    attention_sink: Callable[[int, Tensor], None] | None,
    recompute_blocks: bool,
    ropes: Sequence[tuple[Tensor, Tensor]] | None = None,
    grid: tuple[int, int] | None = None,
) -> tuple[Tensor, list[Tensor], list[Tensor]]:
    """(B, N, D) tokens through ``blocks`` (each ``block(tokens, capture=, [rope=], [grid=])``
    -> (tokens, attention or None); ``rope`` and ``grid`` handed on only when given, ``grid``
    the patch grid a relative position bias is made for): the last tokens, the captured
    attentions (each handed to ``attention_sink(layer, attn)`` instead when given) and the
    block outputs when asked. ``recompute_blocks``: with autograd, each block is run again in
    the backward pass."""
    attentions: list[Tensor] = []
    hidden: list[Tensor] = []
    for i, block in enumerate(blocks):
        given: dict[str, object] = {} if ropes is None else {"rope": ropes[i]}
        if grid is not None:
            given["grid"] = grid
        run = partial(block, **given) if given else block
        if recompute_blocks and torch.is_grad_enabled():
            tokens, attn = recomputed(run, tokens, capture_attention)
        else:
            tokens, attn = run(tokens, capture=capture_attention)
        if attn is not None and attention_sink is not None:
            attention_sink(i, attn)
        elif attn is not None:
            attentions.append(attn)
        del attn
        if hidden_states:
            hidden.append(tokens)
    return tokens, attentions, hidden


def _joined(prefix: list[Tensor], patches: Tensor) -> Tensor:
    """[prefix tokens, patches] along the tokens; with no prefix the patches as they are, in
    the patch embedding's memory layout, as timm keeps them (a copy would change a later
    matmul's float32 rounding)."""
    return torch.cat([*prefix, patches], dim=1) if prefix else patches


class VisionTransformer(nn.Module):
    """Conv2d patch embedding, prefix tokens, position embedding, pre-norm blocks, head."""

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        config.validate()
        self.config = config
        D = config.dim
        hybrid = config.patch_embed == "hybrid"  # a convolutional stem before the tokens
        self.patch_embed = HybridEmbed(config) if hybrid else PatchEmbed(config)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, D)) if config.class_token else None
        self.dist_token = nn.Parameter(torch.zeros(1, 1, D)) if config.distill_token else None
        R = config.num_register_tokens
        self.reg_token = nn.Parameter(torch.zeros(1, R, D)) if R else None
        if config.pos_embed == "learned":
            n_pos = config.num_patches + config.num_pos_prefix_tokens
            self.pos_embed: nn.Parameter | None = nn.Parameter(torch.zeros(1, n_pos, D))
        else:
            self.pos_embed = None
        self.pos_drop = nn.Dropout(config.drop_rate)
        norm = config.norm
        self.norm_pre = make_norm(norm, D, config.norm_eps) if config.pre_norm else nn.Identity()
        self.rope = Rotary(config) if config.rope != "none" else None  # rotary q/k positions
        L = config.depth
        rates = drop_path_rates(config.drop_path_rate, L)
        block = ParallelBlock if config.parallel else Block
        block = BranchedBlock if config.branches > 1 else block
        grouped = config.kv_heads is not None  # grouped-query attention: each block's kv heads
        self.blocks = nn.ModuleList(
            block(config, drop_path=r, **({"kv_heads": config.kv_heads[i]} if grouped else {}))
            for i, r in enumerate(rates)
        )
        self.shared_rel_pos = shared_position_bias(config, self.blocks)  # timm srelpos, or None
        final, fc = config.final_norm and not config.fc_norm, config.final_norm and config.fc_norm
        self.norm = make_norm(norm, D, config.norm_eps) if final else nn.Identity()
        self.fc_norm = make_norm(norm, D, config.norm_eps) if fc else nn.Identity()
        if config.head_hidden_dim:
            self.pre_logits: nn.Module = nn.Sequential(
                nn.Linear(D, config.head_hidden_dim), nn.Tanh()
            )
            head_in = config.head_hidden_dim
        else:
            self.pre_logits = nn.Identity()
            head_in = 2 * D if config.global_pool == "token_avg" else D
        self.pool = (
            AttentionPool(
                D,
                config.pool_heads or config.heads,
                config.pool_hidden_dim or config.hidden_dim,
                config.norm_eps,
                config.activation,
            )
            if config.global_pool == "map"
            else None
        )  # MAP: a probe's attention pools (pool_tokens)
        self.head_drop = nn.Dropout(config.drop_rate)
        C = config.num_classes
        self.head = nn.Linear(head_in, C) if C else nn.Identity()
        dist_head = config.distill_token and config.distill_head and C
        self.head_dist = nn.Linear(D, C) if dist_head else None
        self.init_weights()

    # -- initialisation ---------------------------------------------------------------------------
    def init_weights(self) -> None:
        """Truncated-normal (std 0.02) Linear weights and position table, zero biases."""
        if shapes_only(self):
            return
        init_linears(self)
        if self.pos_embed is not None:
            nn.init.trunc_normal_(self.pos_embed, std=0.02)
        for token in (self.cls_token, self.dist_token, self.reg_token):
            if token is not None:
                nn.init.normal_(token, std=1e-6)

    # -- forward ----------------------------------------------------------------------------------
    @property
    def num_prefix_tokens(self) -> int:
        return self.config.num_prefix_tokens

    def _prefix_tokens(self, B: int) -> list[Tensor]:
        tokens = [t for t in (self.cls_token, self.dist_token, self.reg_token) if t is not None]
        return [t.expand(B, -1, -1) for t in tokens]

    def _patch_pos_embed(self, grid: tuple[int, int]) -> Tensor:
        """Learned patch position table resampled to ``grid``: (1, gh·gw, D)."""
        assert self.pos_embed is not None
        start = self.config.num_pos_prefix_tokens
        return resample_grid_embedding(
            self.pos_embed[:, start:],
            self.config.grid_size,
            grid,
            method=self.config.pos_embed_interp,
        )

    def embed(self, x: Tensor) -> tuple[Tensor, tuple[int, int]]:
        """(B, C, H, W) image -> (B, N, D) tokens with position embedding, and the grid."""
        patches, grid = self.patch_embed(x)  # (B, gh·gw, D)
        B = patches.shape[0]
        prefix = self._prefix_tokens(B)
        kind = self.config.pos_embed
        if kind == "learned":
            patches = patches + self._patch_pos_embed(grid)
            k = self.config.num_pos_prefix_tokens  # leading prefix tokens with a table entry
            if prefix and k:
                head = torch.cat(prefix, dim=1)  # (B, P, D)
                prefix_pos = self.pos_embed[:, :k]  # type: ignore[index]
                if k == head.shape[1]:
                    prefix = [head + prefix_pos]
                else:
                    prefix = [head[:, :k] + prefix_pos, head[:, k:]]
            tokens = _joined(prefix, patches)
        elif kind == "sincos":
            tokens = torch.cat([*prefix, patches], dim=1)
            tokens = tokens + sincos_1d(tokens.shape[1], tokens.shape[2]).to(tokens)
        elif kind == "sincos2d":
            tokens = torch.cat(
                [*prefix, patches + sincos_2d(grid, patches.shape[2]).to(patches)], 1
            )
        else:
            tokens = _joined(prefix, patches)
        return self.norm_pre(self.pos_drop(tokens)), grid

    def forward_features(
        self,
        x: Tensor,
        capture_attention: bool = False,
        hidden_states: bool = False,
        attention_sink: Callable[[int, Tensor], None] | None = None,
        recompute_blocks: bool = False,
    ) -> tuple[Tensor, list[Tensor], list[Tensor], tuple[int, int]]:
        """Tokens after the final norm (B, N, D), attentions, block outputs and the grid.

        ``attention_sink(layer, attn)``: each captured (B, H, N, N) attention is handed to it
        as soon as its block has run, instead of being listed (the caller keeps what it needs,
        so the captured layers never all exist at once). ``recompute_blocks``: with autograd,
        each block keeps only its input and is run again in the backward pass (activation
        checkpointing), so the graph does not hold every layer's attention and activations."""
        tokens, grid = self.embed(x)
        ropes = self.rope.tables(grid, tokens) if self.rope is not None else None
        tokens, attentions, hidden = run_blocks(
            self.blocks,
            tokens,
            capture_attention,
            hidden_states,
            attention_sink,
            recompute_blocks,
            ropes,
            grid,
        )
        return self.norm(tokens), attentions, hidden, grid

    def pool_input(self, tokens: Tensor) -> Tensor:
        """(B, N, D) -> the tokens a pool reads: every token with ``pool_include_prefix``, else
        the patches."""
        return tokens if self.config.pool_include_prefix else tokens[:, self.num_prefix_tokens :]

    def pool_tokens(self, tokens: Tensor) -> Tensor:
        """(B, N, D) final tokens -> (B, D) what the head reads: the CLS token, the mean of the
        patch tokens (or of every token), both side by side (B, 2D), or the attention pool's
        probe (MAP)."""
        cfg = self.config
        if self.pool is not None:
            return self.pool(self.pool_input(tokens))
        if cfg.global_pool == "token":
            return tokens[:, 0]
        mean = self.pool_input(tokens).mean(dim=1)
        return mean if cfg.global_pool == "avg" else torch.cat([tokens[:, 0], mean], dim=-1)

    def head_logits(self, pooled: Tensor) -> Tensor:
        """(B, D) pooled feature -> (B, C) logits of the main head."""
        return self.head(self.head_drop(self.pre_logits(self.fc_norm(pooled))))

    def forward_head(self, tokens: Tensor) -> Tensor:
        """(B, N, D) final tokens -> (B, C) logits (DeiT distilled: mean of both heads)."""
        logits = self.head_logits(self.pool_tokens(tokens))
        if self.head_dist is not None:
            logits = (logits + self.head_dist(tokens[:, 1])) / 2
        return logits

    def forward(self, x: Tensor) -> Tensor:
        """(B, C_in, H, W) -> (B, num_classes) logits; the fused attention path."""
        tokens, _, _, _ = self.forward_features(x)
        return self.forward_head(tokens)

    def forward_explained(
        self,
        x: Tensor,
        capture_attention: bool = True,
        hidden_states: bool = False,
        attention_sink: Callable[[int, Tensor], None] | None = None,
        recompute_blocks: bool = False,
    ) -> ViTOutput:
        """Forward pass that also hands back each layer's attention (and block outputs);
        with ``attention_sink`` the attention goes there instead (``forward_features``)."""
        tokens, attentions, hidden, grid = self.forward_features(
            x, capture_attention, hidden_states, attention_sink, recompute_blocks
        )
        return ViTOutput(
            self.forward_head(tokens), attentions, hidden, grid, self.num_prefix_tokens
        )

    # -- the attention pool's probe (MAP heads) ---------------------------------------------------
    def probe_attention(self, tokens: Tensor) -> tuple[Tensor, Tensor]:
        """(B, N, D) final tokens -> pooled (B, D) and the probe's attention (B, H, N) over every
        token (zero on the prefix tokens a pool without ``pool_include_prefix`` doesn't read)."""
        assert self.pool is not None, "the model has no attention pool"
        pooled, attn = self.pool.attend(self.pool_input(tokens))
        return pooled, self._over_every_token(attn, tokens.shape[1])

    @staticmethod
    def _over_every_token(attn: Tensor, n: int) -> Tensor:
        """(B, H, n') over the tokens the pool read -> (B, H, n), zeros before (prefix)."""
        skipped = n - attn.shape[-1]
        return F.pad(attn, (skipped, 0)) if skipped else attn

    def probe_gradient(self, x: Tensor, target: int) -> tuple[Tensor, Tensor]:
        """The probe's attention A_p (H, N) and G_p = ∂logits[target]/∂A_p (H, N) for one image
        (1, C, H, W): the encoder runs without a graph, the pool and head with one."""
        assert self.pool is not None, "the model has no attention pool"
        with torch.no_grad():
            tokens, _, _, _ = self.forward_features(x)
        with torch.enable_grad():
            pooled, attn = self.pool.attend(self.pool_input(tokens))
            attn.retain_grad()
            self.head_logits(pooled)[0, target].backward()
        assert attn.grad is not None
        n = tokens.shape[1]
        return self._over_every_token(attn.detach(), n)[0], self._over_every_token(attn.grad, n)[0]
