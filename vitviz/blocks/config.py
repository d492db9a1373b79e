"""ViTConfig: every number and switch needed to rebuild the one ViT of vitviz."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from vitviz.blocks.stem_config import StemConfig

POS_EMBED_KINDS = ("learned", "sincos", "sincos2d", "none")
NORMS = ("layernorm", "rmsnorm")  # the blocks' norm (vitviz/blocks/norms.py)
SWIGLU_PACKINGS = ("", "gate_value", "value_gate")  # ViTConfig.swiglu_packed
POOLS = ("token", "avg", "token_avg", "map")  # token_avg: [CLS, mean of the patches] (DINOv2
# heads); map: a learnt probe's multi-head attention over the final tokens (attention_pool)
ACTIVATIONS = ("gelu", "gelu_tanh", "quick_gelu", "relu")
PATCH_EMBEDS = ("conv", "linear", "hybrid")  # hybrid: a convolutional stem (``stem``)
# Rotary positions on the patch tokens' q and k (vitviz/blocks/rotary.py): "axial" (EVA-02's and
# timm's RotaryEmbeddingCat: index coordinates), "mixed" (learnt per-layer, per-head frequencies,
# RoPE-Mixed), "dinov3" (centred coordinates in [-1, 1], DINOv3's periods).
ROPE_KINDS = ("none", "axial", "mixed", "dinov3")
# How a learned position table is resampled to another grid (each library does it its own way):
# "bicubic" (vitviz, timm checkpoint load, HF ViT/DeiT/Dinov2): size-based, no antialias;
# "bicubic_antialias" (timm dynamic size, HF Dinov2WithRegisters, DINOv2 with registers);
# "bicubic_offset" (original DINO / DINOv2): scale factor (g + 0.1) / g0, no antialias.
POS_EMBED_INTERPS = ("bicubic", "bicubic_antialias", "bicubic_offset")


def _pair(value: int | tuple[int, int] | list[int]) -> tuple[int, int]:
    if isinstance(value, int):
        return (value, value)
    h, w = value
    return (int(h), int(w))


@dataclass
class ViTConfig:
    """Architecture of a Vision Transformer (DESIGN §3).

    ``image_size`` is the size the position embedding was trained at, (H, W) or one int for a
    square; other input sizes work, the position embedding is interpolated over the patch grid.
    """

    image_size: tuple[int, int] = (224, 224)
    patch_size: int = 16
    in_channels: int = 3
    num_classes: int = 1000
    dim: int = 768
    depth: int = 12
    heads: int = 12
    mlp_ratio: float = 4.0
    qkv_bias: bool = True
    # Family options.
    mlp_hidden_dim: int | None = None  # overrides mlp_ratio when the hidden size is not dim·ratio
    pos_embed: str = "learned"  # learned | sincos (1-D over tokens) | sincos2d (grid) | none
    class_token: bool = True
    distill_token: bool = False  # DeiT distilled: second prefix token with its own head
    distill_head: bool = True  # its head (False: transformers' DeiTForImageClassification)
    rel_pos_bias: bool = False  # BEiT: a learnt bias per head and relative position, each layer
    num_register_tokens: int = 0
    no_embed_class: bool = False  # position embedding covers the patches only, not prefix tokens
    layer_scale_init: float | None = None  # LayerScale (ls1/ls2) when set
    global_pool: str = "token"  # "token" (CLS) | "avg" (mean of patches) | "token_avg" | "map"
    fc_norm: bool = False  # LayerNorm after pooling instead of before (timm avg-pool models)
    pre_norm: bool = False  # LayerNorm before the blocks (CLIP-style norm_pre)
    norm_eps: float = 1e-6
    activation: str = "gelu"
    head_hidden_dim: int | None = None  # torchvision pre_logits: Linear + tanh before the head
    # Options of foreign families (defaults keep the classic layout above).
    norm_first: bool = True  # pre-norm; False: post-norm (nn.TransformerEncoderLayer default)
    final_norm: bool = True  # LayerNorm after the blocks (or after pooling with fc_norm)
    pos_embed_prefix: int | None = None  # prefix tokens with a position entry; None: no_embed_class
    pos_embed_interp: str = "bicubic"  # see POS_EMBED_INTERPS
    attn_head_dim: int | None = None  # per-head width when heads·head_dim != dim (vit-pytorch)
    pool_include_prefix: bool = False  # "avg" pool over every token, prefix tokens included
    patch_embed: str = "conv"  # "conv" (Conv2d) | "linear" (Linear over (p1 p2 c) patch vectors)
    patch_norm_pre: bool = False  # LayerNorm over each flattened patch before the Linear
    patch_norm_post: bool = False  # LayerNorm after the patch embedding
    stem: StemConfig | None = None  # patch_embed "hybrid": its backbone; patch_size = its stride
    rel_pos_mlp: int = 0  # rel_pos_bias by an MLP this wide on log offsets (timm relpos); 0: table
    rel_pos_shared: bool = False  # that MLP's bias shared by every layer (timm's vit_srelpos_*)
    res_post_norm: bool = False  # residual post-norm: x + norm1(attn(x)), x + norm2(mlp(x)) (rpn)
    rope: str = "none"  # rotary positions on the patches' q and k: see ROPE_KINDS
    rope_half: bool = False  # rotate-half pairs (i, i + hd/2) instead of interleaved (2i, 2i+1)
    rope_temperature: float = 10000.0  # base of the rotary frequencies (periods)
    rope_ref_grid: tuple[int, int] | None = None  # EVA: index positions rescaled to this grid
    rope_xy: bool = False  # coordinates (column, row) instead of (row, column) (timm 'xy')
    rope_offset: float = 0.0  # added to each grid coordinate (timm grid_offset)
    swiglu: bool = False  # MLP fc2(SiLU(fc1_g x) · fc1_x x) (EVA-02's SwiGLU)
    # SwiGLU's fc1_g and fc1_x run as one product, their weights packed in this order, as timm's
    # GluMlp's one fc1 ("gate_value" | "value_gate"); "" two products. One GEMM of twice the
    # width rounds otherwise than two (DESIGN §3: the library's order of operations)
    swiglu_packed: str = ""
    mlp_norm: bool = False  # sub-LN: a LayerNorm before the MLP's fc2
    attn_norm: bool = False  # sub-LN: a LayerNorm on the heads' output before proj
    norm: str = "layernorm"  # the blocks' and final norms: "layernorm" | "rmsnorm" (timm RmsNorm)
    qk_norm: bool = False  # a norm over each head's q and k before the scores (timm qk_norm)
    parallel: bool = False  # attention and MLP side by side on one norm (timm ParallelScaling)
    # several pre-norm attention branches summed, then several MLP branches (timm
    # ParallelThings); each layer's attention is its branches' heads side by side
    branches: int = 1
    pool_heads: int | None = None  # the attention pool's (MAP) heads; None: ``heads`` (timm PE)
    pool_hidden_dim: int | None = None  # the attention pool's MLP width; None: ``hidden_dim``
    # Grouped-query attention: each block's key/value heads, dividing ``heads``; query head h
    # reads kv head h // (heads / kv) (timm's num_kv_heads). None: ``heads`` in every block
    kv_heads: tuple[int, ...] | None = None
    layer_scale_mlp: bool = True  # LayerScale on the MLP branch too; False: attention only
    # Training-only regularisation (no effect in eval mode).
    drop_rate: float = 0.0
    attn_drop_rate: float = 0.0
    drop_path_rate: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.image_size = _pair(self.image_size)
        if isinstance(self.stem, dict):  # from to_dict / a JSON config
            self.stem = StemConfig(**self.stem)
        if self.rope_ref_grid is not None:
            self.rope_ref_grid = _pair(self.rope_ref_grid)
        if self.kv_heads is not None:  # a JSON config's list
            self.kv_heads = tuple(int(h) for h in self.kv_heads)
        self.validate()

    # -- derived ----------------------------------------------------------------------------------
    @property
    def grid_size(self) -> tuple[int, int]:
        """(gh, gw): the patch grid at the trained image size."""
        return (self.image_size[0] // self.patch_size, self.image_size[1] // self.patch_size)

    @property
    def num_patches(self) -> int:
        gh, gw = self.grid_size
        return gh * gw

    @property
    def num_prefix_tokens(self) -> int:
        """Tokens before the patches: CLS, distillation, registers."""
        return int(self.class_token) + int(self.distill_token) + self.num_register_tokens

    @property
    def num_pos_prefix_tokens(self) -> int:
        """How many prefix tokens (from the front) get an entry of the learned position table."""
        if self.pos_embed_prefix is not None:
            return self.pos_embed_prefix
        return 0 if self.no_embed_class else self.num_prefix_tokens

    @property
    def head_dim(self) -> int:
        return self.attn_head_dim or self.dim // self.heads

    @property
    def attn_dim(self) -> int:
        """Width of q, k and v together over the heads: heads · head_dim (usually dim)."""
        return self.heads * self.head_dim

    @property
    def layer_heads(self) -> int:
        """The heads of one layer's attention: ``heads`` in each of its ``branches``."""
        return self.heads * self.branches

    def block_kv_heads(self, layer: int) -> int:
        """Block ``layer``'s key/value heads (``heads`` without grouped-query attention)."""
        return self.heads if self.kv_heads is None else self.kv_heads[layer]

    @property
    def hidden_dim(self) -> int:
        return self.mlp_hidden_dim or int(self.dim * self.mlp_ratio)

    # -- checks and (de)serialisation -----------------------------------------------------------
    def validate(self) -> None:
        """Raise ValueError with a plain message when the settings can't build a working ViT."""
        problems = []
        for name in ("patch_size", "in_channels", "dim", "depth", "heads"):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be at least 1 (got {getattr(self, name)})")
        if self.num_classes < 0:
            problems.append(f"num_classes must be 0 or more (got {self.num_classes})")
        if self.attn_head_dim is not None and self.attn_head_dim < 1:
            problems.append(f"attn_head_dim must be at least 1 (got {self.attn_head_dim})")
        if self.attn_head_dim is None and self.heads >= 1 and self.dim % self.heads:
            problems.append(f"dim {self.dim} is not divisible by heads {self.heads}")
        h, w = self.image_size
        if self.patch_size >= 1 and (h % self.patch_size or w % self.patch_size):
            problems.append(f"image size {h}×{w} is not divisible by patch size {self.patch_size}")
        if self.pos_embed not in POS_EMBED_KINDS:
            problems.append(f"pos_embed must be one of {POS_EMBED_KINDS} (got {self.pos_embed!r})")
        if self.global_pool not in POOLS:
            problems.append(f"global_pool must be one of {POOLS} (got {self.global_pool!r})")
        if self.activation not in ACTIVATIONS:
            problems.append(f"activation must be one of {ACTIVATIONS} (got {self.activation!r})")
        if self.global_pool in ("token", "token_avg") and not self.class_token:
            problems.append(f"global_pool {self.global_pool!r} needs class_token=True")
        if self.global_pool == "map" and (self.distill_token or self.head_hidden_dim):
            problems.append("global_pool 'map' takes no distillation token or head_hidden_dim")
        if self.global_pool == "token_avg" and (self.fc_norm or self.head_hidden_dim):
            problems.append("global_pool 'token_avg' takes no fc_norm or head_hidden_dim")
        if self.rel_pos_bias and not self.rel_pos_mlp and self.num_prefix_tokens > 1:
            problems.append("a relative position table takes at most a CLS token before patches")
        mlp_bias = self.rel_pos_bias and self.rel_pos_mlp > 0
        if (self.rel_pos_mlp or self.rel_pos_shared) and not mlp_bias:
            problems.append("rel_pos_mlp (≥ 1) and rel_pos_shared need rel_pos_bias")
        if self.res_post_norm and not self.norm_first:
            problems.append("res_post_norm and norm_first=False are two other norm placements")
        if self.distill_token and not self.class_token:
            problems.append("distill_token needs class_token=True")
        if self.num_register_tokens < 0:
            problems.append("num_register_tokens must be 0 or more")
        if self.pos_embed_prefix is not None:
            if not 0 <= self.pos_embed_prefix <= self.num_prefix_tokens:
                problems.append(
                    f"pos_embed_prefix must be in 0..{self.num_prefix_tokens} "
                    f"(got {self.pos_embed_prefix})"
                )
            elif self.no_embed_class and self.pos_embed_prefix:
                problems.append("no_embed_class contradicts pos_embed_prefix > 0")
        if self.pos_embed_interp not in POS_EMBED_INTERPS:
            problems.append(
                f"pos_embed_interp must be one of {POS_EMBED_INTERPS} "
                f"(got {self.pos_embed_interp!r})"
            )
        if self.patch_embed not in PATCH_EMBEDS:
            problems.append(f"patch_embed must be one of {PATCH_EMBEDS} (got {self.patch_embed!r})")
        if (self.patch_embed == "hybrid") != (self.stem is not None):
            problems.append("patch_embed 'hybrid' and a stem go together")
        elif self.stem is not None:
            problems += self.stem.problems()
            if self.patch_size != self.stem.stride:
                problems.append(f"a hybrid's patch_size is its stem's stride {self.stem.stride}")
            if self.stem.proj_patch == 0 and self.stem.feature_dim != self.dim:
                problems.append("a stem without a projection must give dim channels")
        if self.patch_norm_pre and self.patch_embed != "linear":
            problems.append("patch_norm_pre needs patch_embed 'linear'")
        problems += self._rope_problems()
        problems += self._block_problems()
        problems += self._pool_problems()
        for name in ("drop_rate", "attn_drop_rate", "drop_path_rate"):
            if not 0.0 <= getattr(self, name) < 1.0:
                problems.append(f"{name} must be in [0, 1) (got {getattr(self, name)})")
        if problems:
            raise ValueError("Invalid ViT config: " + "; ".join(problems))

    def _block_problems(self) -> list[str]:
        """The norm kind, and what a parallel block (one fused in-projection) can't have."""
        problems = []
        if self.norm not in NORMS:
            problems.append(f"norm must be one of {NORMS} (got {self.norm!r})")
        if self.swiglu_packed not in SWIGLU_PACKINGS or (self.swiglu_packed and not self.swiglu):
            problems.append(
                f"swiglu_packed must be one of {SWIGLU_PACKINGS}, set only with swiglu "
                f"(got {self.swiglu_packed!r})"
            )
        if self.norm != "layernorm" and (self.global_pool == "map" or self.patch_norm_post):
            problems.append("an attention pool and a patch norm are LayerNorms (norm 'layernorm')")
        if self.parallel:
            others = ("res_post_norm", "swiglu", "mlp_norm", "attn_norm", "rel_pos_bias")
            kept = [n for n in others if getattr(self, n)]
            if not self.norm_first:
                kept.append("norm_first=False")
            if self.rope != "none":
                kept.append("rope")
            if self.attn_head_dim is not None:
                kept.append("attn_head_dim")
            if kept:
                problems.append(f"parallel blocks take no {', '.join(kept)}")
        problems += self._kv_problems() + self._layer_scale_problems()
        return problems + self._branch_problems()

    def _kv_problems(self) -> list[str]:
        """Grouped-query attention: one kv head count per block, each dividing ``heads``; the
        blocks that fuse or join heads otherwise take none."""
        if self.kv_heads is None:
            return []
        if len(self.kv_heads) != self.depth:
            return [f"kv_heads needs one entry per block ({len(self.kv_heads)} for {self.depth})"]
        problems = []
        bad = sorted({h for h in self.kv_heads if h < 1 or self.heads % h})
        if bad:
            problems.append(f"kv_heads must divide heads {self.heads} (got {bad})")
        kept = [n for n in ("parallel", "rel_pos_bias") if getattr(self, n)]
        kept += ["branches"] if self.branches > 1 else []
        kept += ["rope 'mixed'"] if self.rope == "mixed" else []
        if kept:
            problems.append(f"grouped-query attention (kv_heads) takes no {', '.join(kept)}")
        return problems

    def _layer_scale_problems(self) -> list[str]:
        """LayerScale on the attention branch only: a plain block's, with a LayerScale."""
        if self.layer_scale_mlp:
            return []
        if self.layer_scale_init is None or self.parallel or self.branches > 1:
            return ["layer_scale_mlp=False needs layer_scale_init and plain (not parallel or "
                    "branched) blocks"]  # fmt: skip
        return []

    def _branch_problems(self) -> list[str]:
        """What blocks of several branches (``vitviz.blocks.branches``) can't have."""
        if self.branches < 1:
            return [f"branches must be at least 1 (got {self.branches})"]
        if self.branches == 1:
            return []
        others = ("parallel", "res_post_norm", "swiglu", "rel_pos_bias")
        kept = [n for n in others if getattr(self, n)]
        kept += ["norm_first=False"] if not self.norm_first else []
        kept += ["rope"] if self.rope != "none" else []
        return [f"blocks of several branches take no {', '.join(kept)}"] if kept else []

    def _pool_problems(self) -> list[str]:
        """The attention pool's own head count and MLP width: set only with global_pool 'map'."""
        problems = []
        for name in ("pool_heads", "pool_hidden_dim"):
            value = getattr(self, name)
            if value is None:
                continue
            if self.global_pool != "map":
                problems.append(f"{name} needs global_pool 'map'")
            elif value < 1:
                problems.append(f"{name} must be at least 1 (got {value})")
        if self.global_pool == "map" and self.pool_heads and self.dim % self.pool_heads:
            problems.append(f"dim {self.dim} is not divisible by pool_heads {self.pool_heads}")
        return problems

    def _rope_problems(self) -> list[str]:
        if self.rope not in ROPE_KINDS:
            return [f"rope must be one of {ROPE_KINDS} (got {self.rope!r})"]
        if self.rope == "none":
            return []
        problems = []
        if self.head_dim % 4:
            problems.append(
                f"rotary positions need a head width divisible by 4 (got {self.head_dim})"
            )
        if self.rope == "mixed" and self.rope_half:
            problems.append("rope 'mixed' rotates interleaved pairs (rope_half must be False)")
        if self.rope_temperature <= 0:
            problems.append("rope_temperature must be positive")
        if self.rope_ref_grid is not None and min(self.rope_ref_grid) < 1:
            problems.append("rope_ref_grid must be positive")
        return problems

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["image_size"] = list(self.image_size)
        if self.rope_ref_grid is not None:
            d["rope_ref_grid"] = list(self.rope_ref_grid)
        if self.kv_heads is not None:
            d["kv_heads"] = list(self.kv_heads)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ViTConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"Unknown ViT config fields: {', '.join(unknown)}")
        return cls(**d)

    def replace(self, **changes: Any) -> ViTConfig:
        return dataclasses.replace(self, **changes)
