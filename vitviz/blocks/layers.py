"""Building blocks of the ViT: patch embedding, attention with explicit capture, MLP, block."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vitviz.blocks.config import ViTConfig
from vitviz.blocks.norms import make_norm
from vitviz.blocks.position_bias import MlpPositionBias, resample_table, table_index, table_rows
from vitviz.blocks.rotary import apply_rotary
from vitviz.blocks.swiglu import SwiGLU


class PatchEmbed(nn.Module):
    """Patches -> tokens: (B, C, H, W) -> (B, gh·gw, dim), row-major patches.

    ``patch_embed="conv"``: Conv2d with kernel = stride = patch. ``"linear"``: each patch flattened
    in (p1 p2 c) order (einops ``b c (h p1) (w p2) -> b (h w) (p1 p2 c)``), optionally
    LayerNorm-ed (``patch_norm_pre``), then a Linear. ``patch_norm_post``: LayerNorm after either.
    """

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.patch_size = config.patch_size
        self.linear = config.patch_embed == "linear"
        p = config.patch_size
        patch_dim = config.in_channels * p * p
        eps = config.norm_eps
        self.norm_pre: nn.Module = (
            nn.LayerNorm(patch_dim, eps=eps) if config.patch_norm_pre else nn.Identity()
        )
        self.proj: nn.Module = (
            nn.Linear(patch_dim, config.dim)
            if self.linear
            else nn.Conv2d(config.in_channels, config.dim, kernel_size=p, stride=p)
        )
        self.norm: nn.Module = (
            nn.LayerNorm(config.dim, eps=eps) if config.patch_norm_post else nn.Identity()
        )

    def forward(self, x: Tensor) -> tuple[Tensor, tuple[int, int]]:
        B, C, H, W = x.shape
        p = self.patch_size
        if H % p or W % p:
            raise ValueError(f"input {H}×{W} is not divisible by the patch size {p}")
        grid = (H // p, W // p)
        if self.linear:
            x = x.reshape(B, C, grid[0], p, grid[1], p).permute(0, 2, 4, 3, 5, 1)
            x = self.proj(self.norm_pre(x.reshape(B, grid[0] * grid[1], p * p * C)))
        else:
            x = self.proj(x).flatten(2).transpose(1, 2)  # (B, dim, gh, gw) -> (B, gh·gw, dim)
        return self.norm(x), grid


class Attention(nn.Module):
    """Multi-head self-attention with one fused qkv Linear.

    With ``capture=True`` the probabilities softmax(QKᵀ/√d) are computed explicitly and returned,
    shape (B, heads, N, N), rows = queries; otherwise the fused scaled_dot_product_attention runs
    and ``None`` is returned. Both paths give the same output.

    Grouped-query attention (``kv_heads`` < heads): qkv gives [q (heads·hd), k (kv·hd),
    v (kv·hd)]; each kv head's k and v (normed and turned once) serve heads/kv query heads,
    query head h reading kv head h // (heads/kv): the attention stays (B, heads, N, N).
    """

    def __init__(self, config: ViTConfig, kv_heads: int | None = None) -> None:
        super().__init__()
        self.heads = config.heads
        self.head_dim = config.head_dim
        self.attn_dim = config.attn_dim
        self.kv_heads = kv_heads or config.heads
        self.groups = self.heads // self.kv_heads  # query heads per kv head
        self.scale = self.head_dim**-0.5
        out = self.attn_dim + 2 * self.kv_heads * self.head_dim
        self.qkv = nn.Linear(config.dim, out, bias=config.qkv_bias)
        self.attn_drop = nn.Dropout(config.attn_drop_rate)
        self.proj = nn.Linear(self.attn_dim, config.dim)
        self.proj_drop = nn.Dropout(config.drop_rate)
        eps = config.norm_eps  # sub-LN: a norm on the heads' output before proj (EVA-02)
        kind, qk = config.norm, config.qk_norm
        self.norm = make_norm(kind, self.attn_dim, eps) if config.attn_norm else nn.Identity()
        # qk-norm: a norm over each head's q and k before the scores (and the rotary turn)
        self.q_norm = make_norm(kind, self.head_dim, eps) if qk else nn.Identity()
        self.k_norm = make_norm(kind, self.head_dim, eps) if qk else nn.Identity()
        self.prefix, self.rope_half = config.num_prefix_tokens, config.rope_half
        self.relative_position_bias_table: nn.Parameter | None = None
        self.rel_pos: MlpPositionBias | None = None  # timm relpos: an MLP gives the bias
        self._shared: list[MlpPositionBias] = []  # one bias of every layer (not a child)
        self.rel_grid = config.grid_size
        self.rel_cls = config.num_prefix_tokens == 1
        if config.rel_pos_bias and config.rel_pos_mlp:
            if not config.rel_pos_shared:
                self.rel_pos = MlpPositionBias(
                    self.heads, config.rel_pos_mlp, self.rel_grid, config.num_prefix_tokens
                )
        elif config.rel_pos_bias:
            rows = table_rows(self.rel_grid, self.rel_cls)
            self.relative_position_bias_table = nn.Parameter(torch.zeros(rows, self.heads))
        # the table's index (its row per query-key pair) of the last grid run at, made on the
        # table's device when first needed
        self._rel_index: tuple[tuple[int, int], Tensor] | None = None

    def share_position_bias(self, bias: MlpPositionBias) -> None:
        """Read the bias from ``bias``, the model's one shared by every layer."""
        self._shared = [bias]

    def position_bias(self, n: int, grid: tuple[int, int] | None = None) -> Tensor | None:
        """(heads, n, n) added to the attention scores (a relative position bias) for a
        ``grid`` (gh, gw) of patches (None: the grid it was learnt on), or None without one.
        On another grid a table is resampled as transformers' BEiT does
        (``position_bias.resample_table``) and an MLP is evaluated at that grid's offsets
        (DESIGN §3). ValueError when ``n`` is not the grid's token count."""
        table = self.relative_position_bias_table
        mlp = self.rel_pos if self.rel_pos is not None else next(iter(self._shared), None)
        if table is None and mlp is None:
            return None
        gh, gw = self.rel_grid if grid is None else grid
        expected = gh * gw + (mlp.prefix if mlp is not None else int(self.rel_cls))
        if n != expected:
            raise ValueError(
                f"a relative position bias over {gh}×{gw} patches: this input gives another "
                f"token count ({n})"
            )
        if mlp is not None:
            return mlp((gh, gw))
        assert table is not None
        kept = self._rel_index
        index = kept[1] if kept is not None and kept[0] == (gh, gw) else None
        if index is None or index.device != table.device:  # not a buffer: a meta-built model
            with torch.inference_mode(False):  # kept: a later backward pass saves it
                index = table_index((gh, gw), self.rel_cls).to(table.device)
            self._rel_index = ((gh, gw), index)
        table = resample_table(table, self.rel_grid, (gh, gw), self.rel_cls)
        return table[index.view(-1)].view(n, n, -1).permute(2, 0, 1)

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(B, N, dim) -> q (B, heads, N, hd), k and v (B, kv_heads, N, hd), unnormed."""
        B, N, _ = x.shape
        if self.groups == 1:
            qkv = self.qkv(x).reshape(B, N, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
            q, k, v = qkv.unbind(0)
            return q, k, v
        kv = self.kv_heads * self.head_dim
        parts = self.qkv(x).split([self.attn_dim, kv, kv], dim=-1)
        q, k, v = (t.reshape(B, N, -1, self.head_dim).transpose(1, 2) for t in parts)
        return q, k, v

    def shared(self, t: Tensor) -> Tensor:
        """(B, kv_heads, N, hd) -> (B, heads, N, hd): each kv head for its query heads."""
        return t if self.groups == 1 else t.repeat_interleave(self.groups, dim=1)

    def forward(
        self,
        x: Tensor,
        capture: bool = False,
        rope: tuple[Tensor, Tensor] | None = None,
        grid: tuple[int, int] | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """``rope``: this layer's rotary (sin, cos) tables for the patch tokens, or None;
        ``grid``: the patch grid (gh, gw) of ``x``'s tokens, for a relative position bias (None:
        the grid it was learnt on)."""
        B, N, _ = x.shape
        q, k, v = self.project(x)
        q, k = apply_rotary(self.q_norm(q), self.k_norm(k), rope, self.prefix, self.rope_half)
        k, v = self.shared(k), self.shared(v)
        bias = self.position_bias(N, grid)
        attn: Tensor | None = None
        if capture:
            scores = (q * self.scale) @ k.transpose(-2, -1)  # (B, nh, N, N)
            attn = (scores if bias is None else scores + bias).softmax(dim=-1)
            out = self.attn_drop(attn) @ v  # (B, nh, N, hd)
        else:
            p = self.attn_drop.p if self.training else 0.0
            mask = None if bias is None else bias.to(q.dtype)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        out = self.norm(out.transpose(1, 2).reshape(B, N, self.attn_dim))
        return self.proj_drop(self.proj(out)), attn


def make_activation(name: str) -> nn.Module:
    if name == "gelu":
        return nn.GELU()
    if name == "gelu_tanh":
        return nn.GELU(approximate="tanh")
    if name == "quick_gelu":
        return QuickGELU()
    if name == "relu":
        return nn.ReLU()
    raise ValueError(f"unknown activation {name!r}")


class QuickGELU(nn.Module):
    """x·sigmoid(1.702x), the GELU approximation of CLIP."""

    def forward(self, x: Tensor) -> Tensor:
        return x * torch.sigmoid(1.702 * x)


class Mlp(nn.Module):
    """Linear -> activation -> dropout -> Linear -> dropout: (B, N, dim) -> (B, N, dim)."""

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.fc1 = nn.Linear(config.dim, config.hidden_dim)
        self.act = make_activation(config.activation)
        self.norm: nn.Module = (  # sub-LN before fc2 (EVA's scale_mlp)
            make_norm(config.norm, config.hidden_dim, config.norm_eps)
            if config.mlp_norm
            else nn.Identity()
        )
        self.fc2 = nn.Linear(config.hidden_dim, config.dim)
        self.drop = nn.Dropout(config.drop_rate)

    def forward(self, x: Tensor) -> Tensor:
        return self.drop(self.fc2(self.norm(self.drop(self.act(self.fc1(x))))))


class LayerScale(nn.Module):
    """Per-channel learned scale (CaiT / DINOv2): x·gamma."""

    def __init__(self, dim: int, init: float) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.full((dim,), float(init)))

    def forward(self, x: Tensor) -> Tensor:
        return x * self.gamma


class DropPath(nn.Module):
    """Stochastic depth: drops the whole residual branch per sample while training."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        keep = 1.0 - self.p
        mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)
        return x * mask / keep


class Block(nn.Module):
    """Encoder block. Pre-norm (default): x + attn(norm1(x)); x + mlp(norm2(x)).

    Post-norm (``norm_first=False``, nn.TransformerEncoderLayer's default):
    norm1(x + attn(x)); norm2(x + mlp(x)). Residual post-norm (``res_post_norm``, timm's
    rpn): x + norm1(attn(x)); x + norm2(mlp(x)).
    """

    def __init__(
        self, config: ViTConfig, drop_path: float = 0.0, kv_heads: int | None = None
    ) -> None:
        super().__init__()
        self.norm1 = make_norm(config.norm, config.dim, config.norm_eps)
        self.attn = Attention(config, kv_heads)
        self.norm2 = make_norm(config.norm, config.dim, config.norm_eps)
        self.mlp = SwiGLU(config) if config.swiglu else Mlp(config)
        ls = config.layer_scale_init
        self.ls1 = LayerScale(config.dim, ls) if ls is not None else nn.Identity()
        ls = ls if config.layer_scale_mlp else None  # attention-only LayerScale (Sapiens2)
        self.ls2 = LayerScale(config.dim, ls) if ls is not None else nn.Identity()
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        self.norm_first = config.norm_first
        self.res_post_norm = config.res_post_norm

    @property
    def mlp_branch(self) -> nn.Module:
        """The module whose output the residual adds as the MLP branch, up to LayerScale and
        drop path: the norm after the MLP in a residual post-norm block, else the MLP."""
        return self.norm2 if self.res_post_norm else self.mlp

    @property
    def attention_branch(self) -> nn.Module | None:
        """The module whose output the residual adds as the attention branch where it is not
        the attention's output projection: the norm after the attention in a residual
        post-norm block (None otherwise)."""
        return self.norm1 if self.res_post_norm else None

    @property
    def norm1_is_pre_norm(self) -> bool:
        """Whether norm1's output is the block's input normalised, the tokens its attention
        reads (DESIGN §5: the CAM family's ``auto``): a post-norm block's norm1 follows the
        attention, normalising x + attn(x) or (residual post-norm) attn(x)."""
        return self.norm_first and not self.res_post_norm

    def forward(
        self,
        x: Tensor,
        capture: bool = False,
        rope: tuple[Tensor, Tensor] | None = None,
        grid: tuple[int, int] | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """``rope`` and ``grid``: as the attention takes them (``Attention.forward``)."""
        if self.res_post_norm:
            y, attn = self.attn(x, capture=capture, rope=rope, grid=grid)
            x = x + self.drop_path(self.ls1(self.norm1(y)))
            return x + self.drop_path(self.ls2(self.norm2(self.mlp(x)))), attn
        if not self.norm_first:
            y, attn = self.attn(x, capture=capture, rope=rope, grid=grid)
            x = self.norm1(x + self.drop_path(self.ls1(y)))
            x = self.norm2(x + self.drop_path(self.ls2(self.mlp(x))))
            return x, attn
        y, attn = self.attn(self.norm1(x), capture=capture, rope=rope, grid=grid)
        x = x + self.drop_path(self.ls1(y))
        x = x + self.drop_path(self.ls2(self.mlp(self.norm2(x))))
        return x, attn
