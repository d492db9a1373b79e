"""What the library check builds for a timm ViT conversion: timm's model of the name with the
settings vitviz resolved beside it (heads, pooling, fc_norm, activation, table layout), or, for
a bare file no timm name has, timm's own VisionTransformer with every setting given; and the
words its note says them with ("with 6 heads, mean pooling")."""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Any

from torch import nn

from vitviz.checkpoints.families.base import Conversion
from vitviz.checkpoints.families.timm_library import LIBRARY_MODEL
from vitviz.checkpoints.library_check import Reference
from vitviz.kinds.vit.families.timm_resolve import ACT_NAMES
from vitviz.kinds.vit.families.timm_settings import POOL_WORDS

# vitviz's settings -> timm VisionTransformer's keyword, for the library check to build the
# model vitviz built (the resolved settings, not the name's defaults).
CHECK_ARGS = {
    "heads": "num_heads",
    "global_pool": "global_pool",
    "fc_norm": "fc_norm",
    "activation": "act_layer",
    "no_embed_class": "no_embed_class",
}


def same_settings(ref: Reference, settings: dict[str, Any], conversion: Conversion) -> Reference:
    """``ref`` built like the file: its sizes (width, depth, MLP width, patch, which the weights
    show and a name's defaults need not have: a fine-tune, a small model given a name), and the
    resolved settings that differ from the name's, as timm's keywords; with the words for them
    ("width 64, depth 2, 6 heads, mean pooling") the check's note shows."""
    cfg = conversion.config
    args = {**dict(ref.model_args), **size_args(cfg)}
    words = [f"width {cfg.dim}, depth {cfg.depth}"]
    for ours, theirs in CHECK_ARGS.items():
        value = getattr(cfg, ours)
        if ours in settings and settings[ours] != value and theirs not in ref.model_args:
            args[theirs] = value
            words.append(setting_words(ours, value))
    if "global_pool" in args and "fc_norm" not in args:  # timm's fc_norm=None follows the pool
        args["fc_norm"] = cfg.fc_norm
    return dataclasses.replace(ref, model_args=args, settings=", ".join(words))


def size_args(cfg: Any) -> dict[str, Any]:
    """timm's keywords for the sizes the weights show: width, depth, patch, MLP ratio (one
    whose ``int(dim · ratio)`` gives the file's MLP width back)."""
    ratio = cfg.hidden_dim / cfg.dim
    if int(cfg.dim * ratio) != cfg.hidden_dim:
        ratio = (cfg.hidden_dim + 0.5) / cfg.dim
    return {
        "patch_size": cfg.patch_size,
        "embed_dim": cfg.dim,
        "depth": cfg.depth,
        "mlp_ratio": ratio,
    }


def _norm_layer(cfg: Any) -> Any:
    """timm's norm of ``cfg``'s kind with its eps (None: timm is not importable)."""
    try:
        from timm.layers import RmsNorm
    except ImportError:
        return None
    return partial(RmsNorm if cfg.norm == "rmsnorm" else nn.LayerNorm, eps=cfg.norm_eps)


def common_reference(cfg: Any) -> Reference:
    """timm's own VisionTransformer built with every setting vitviz resolved for a bare file no
    timm name has (its widths, depth, tokens, heads, pooling, activation, eps, image size, block
    kind: qk-norm, parallel, branches, residual post-norm, sub-norms, RMSNorm; an attention
    pool of the blocks' heads and MLP width), or a relative-position ViT's
    (``relpos_reference``); a setting its keywords can't give (another head width, positions,
    a distillation token, a convolutional stem ...) is named in ``unexpressible``: the check
    says why it did not run."""
    if cfg.rel_pos_bias:  # timm's relative-position ViT is another class
        return relpos_reference(cfg)
    why = _not_in_vision_transformer(cfg)
    blocks = _block_args(cfg) if not why else {}
    if blocks is None:
        why = "timm is not importable"
    args = dict(
        **size_args(cfg), num_heads=cfg.heads, qkv_bias=cfg.qkv_bias, qk_norm=cfg.qk_norm,
        scale_attn_norm=cfg.attn_norm, scale_mlp_norm=cfg.mlp_norm,
        init_values=1.0 if cfg.layer_scale_init is not None else None,
        class_token=cfg.class_token, reg_tokens=cfg.num_register_tokens,
        no_embed_class=cfg.no_embed_class, pre_norm=cfg.pre_norm, final_norm=cfg.final_norm,
        fc_norm=cfg.fc_norm, global_pool=cfg.global_pool, act_layer=cfg.activation,
        pool_include_prefix=cfg.pool_include_prefix,
        pos_embed="learn" if cfg.pos_embed == "learned" else "none", **(blocks or {}),
    )  # fmt: skip
    h, w = cfg.image_size
    parts = [
        f"width {cfg.dim}, depth {cfg.depth}, {cfg.heads} heads",
        POOL_WORDS.get(cfg.global_pool, cfg.global_pool),
        *(["fc_norm"] if cfg.fc_norm else []),
        ACT_NAMES.get(cfg.activation, cfg.activation),
        f"{h}×{w}",
        *(["qk-norm"] if cfg.qk_norm else []),
        *(["parallel blocks"] if cfg.parallel else []),
        *([f"{cfg.branches} branches"] if cfg.branches > 1 else []),
        *(["residual post-norm"] if cfg.res_post_norm else []),
        *(["sub-norms"] if cfg.attn_norm or cfg.mlp_norm else []),
        *(["RMSNorm"] if cfg.norm == "rmsnorm" else []),
        *([] if cfg.norm_eps == 1e-6 else [f"{_NORM_WORDS[cfg.norm]} eps {cfg.norm_eps:g}"]),
    ]
    return Reference(
        "timm",
        COMMON_NAME,
        args,
        ", ".join(parts),
        shown_as="VisionTransformer",
        unexpressible=why,
        how=LIBRARY_MODEL,
    )


_NORM_WORDS = {"layernorm": "LayerNorm", "rmsnorm": "RMSNorm"}


def _not_in_vision_transformer(cfg: Any) -> str:
    """Why timm's VisionTransformer's keywords can't build ``cfg`` ("" when they can)."""
    unlike = [
        (cfg.attn_head_dim is not None, f"{cfg.heads} heads of {cfg.attn_head_dim}"),
        (cfg.pos_embed not in ("learned", "none"), f"{cfg.pos_embed} positions"),
        (cfg.rel_pos_bias, "relative position biases"),
        (cfg.rope != "none", "rotary positions"),
        (cfg.distill_token, "a distillation token"),
        (cfg.global_pool not in ("token", "avg", "map"), f"pooling {cfg.global_pool!r}"),
        *_pool_unlike(cfg),
        (cfg.head_hidden_dim is not None, "a hidden layer before the head"),
        (not cfg.norm_first, "post-norm blocks"),
        (cfg.patch_embed != "conv", f"a {cfg.patch_embed} patch embedding"),
        (cfg.patch_norm_pre or cfg.patch_norm_post, "a norm in the patch embedding"),
        (cfg.swiglu, "a SwiGLU MLP"),
        (cfg.pos_embed_prefix is not None, "a position table over some prefix tokens"),
        (cfg.parallel and cfg.branches > 1, "parallel blocks of several branches"),
        (cfg.res_post_norm and (cfg.parallel or cfg.branches > 1), "parallel post-norm blocks"),
    ]
    found = [words for present, words in unlike if present]
    if not found:
        return ""
    return f"timm's VisionTransformer has no keyword for {found[0]} (no timm name has its tensors)"


def _pool_unlike(cfg: Any) -> list[tuple[bool, str]]:
    """An attention pool (MAP) timm's VisionTransformer can't give: it builds its pool with the
    blocks' heads and MLP ratio."""
    if cfg.global_pool != "map":
        return []
    heads, hidden = cfg.pool_heads or cfg.heads, cfg.pool_hidden_dim or cfg.hidden_dim
    return [
        (heads != cfg.heads, f"an attention pool of {heads} heads (the blocks have {cfg.heads})"),
        (hidden != cfg.hidden_dim, f"an attention pool's MLP of width {hidden}"),
    ]


RELPOS_NAME = "vit_relpos_base_patch16_224"  # any relpos name: every setting is given beside it


def relpos_reference(cfg: Any) -> Reference:
    """timm's own VisionTransformerRelPos built with every setting vitviz read for a bare
    relative-position ViT no timm name has (sizes, heads, the bias's MLP width or its table, a
    bias shared by the layers, tokens, pooling, fc_norm, LayerScale, residual post-norm, norm and
    eps, activation, qk-norm); a setting its keywords can't give is named in ``unexpressible``."""
    why = _not_in_relpos(cfg)
    blocks = {} if why else _relpos_block_args(cfg)
    if blocks is None:
        why = "timm is not importable"
    args = dict(
        **size_args(cfg), num_heads=cfg.heads, qkv_bias=cfg.qkv_bias, qk_norm=cfg.qk_norm,
        # 0.0: no LayerScale (timm drops a None keyword and takes its 1e-6)
        init_values=1.0 if cfg.layer_scale_init is not None else 0.0,
        class_token=cfg.class_token, fc_norm=cfg.fc_norm, global_pool=cfg.global_pool,
        rel_pos_type="mlp" if cfg.rel_pos_mlp else "bias", rel_pos_dim=cfg.rel_pos_mlp or None,
        shared_rel_pos=cfg.rel_pos_shared, **(blocks or {}),
    )  # fmt: skip
    h, w = cfg.image_size
    bias = f"a relative position MLP of {cfg.rel_pos_mlp}" if cfg.rel_pos_mlp else "a table"
    parts = [
        f"width {cfg.dim}, depth {cfg.depth}, {cfg.heads} heads",
        bias + (" shared by every layer" if cfg.rel_pos_shared else ""),
        POOL_WORDS.get(cfg.global_pool, cfg.global_pool),
        *(["fc_norm"] if cfg.fc_norm else []),
        ACT_NAMES.get(cfg.activation, cfg.activation),
        f"{h}×{w}",
        *(["qk-norm"] if cfg.qk_norm else []),
        *(["residual post-norm"] if cfg.res_post_norm else []),
        *([] if cfg.norm_eps == 1e-6 else [f"{_NORM_WORDS[cfg.norm]} eps {cfg.norm_eps:g}"]),
    ]
    return Reference(
        "timm", RELPOS_NAME, args, ", ".join(parts), shown_as="VisionTransformerRelPos",
        unexpressible=why, how=LIBRARY_MODEL,
    )  # fmt: skip


def _not_in_relpos(cfg: Any) -> str:
    """Why timm's VisionTransformerRelPos's keywords can't build ``cfg`` ("" when they can)."""
    unlike = [
        (cfg.attn_head_dim is not None, f"{cfg.heads} heads of {cfg.attn_head_dim}"),
        (cfg.pos_embed != "none", f"{cfg.pos_embed} positions beside the relative bias"),
        (cfg.rope != "none", "rotary positions"),
        (cfg.distill_token, "a distillation token"),
        (cfg.num_register_tokens > 0, "register tokens"),
        (cfg.global_pool not in ("token", "avg"), f"pooling {cfg.global_pool!r}"),
        (cfg.pool_include_prefix, "a mean over the prefix tokens too"),
        (cfg.head_hidden_dim is not None, "a hidden layer before the head"),
        (not cfg.norm_first, "post-norm blocks"),
        (cfg.pre_norm, "a norm before the blocks"),
        (not cfg.final_norm, "no final norm"),
        (cfg.patch_embed != "conv", f"a {cfg.patch_embed} patch embedding"),
        (cfg.patch_norm_pre or cfg.patch_norm_post, "a norm in the patch embedding"),
        (cfg.swiglu, "a SwiGLU MLP"),
        (cfg.attn_norm or cfg.mlp_norm, "norms inside the attention or the MLP"),
        (cfg.parallel or cfg.branches > 1, "parallel blocks"),
    ]
    found = [words for present, words in unlike if present]
    if not found:
        return ""
    return (
        f"timm's VisionTransformerRelPos has no keyword for {found[0]} (no timm name has its "
        "tensors)"
    )


def _relpos_block_args(cfg: Any) -> dict[str, Any] | None:
    """timm relpos's block, norm and activation of ``cfg`` as classes (its keywords take no
    names); None: timm is not importable."""
    try:
        from timm.layers import get_act_layer
        from timm.models.vision_transformer_relpos import ResPostRelPosBlock
    except ImportError:
        return None
    args: dict[str, Any] = {
        "norm_layer": _norm_layer(cfg),
        "act_layer": get_act_layer(cfg.activation),
    }
    if cfg.res_post_norm:
        args["block_fn"] = ResPostRelPosBlock
    return args


def _block_args(cfg: Any) -> dict[str, Any] | None:
    """timm's keywords for the block kind and norm of ``cfg`` (None: timm is not importable)."""
    try:
        from timm.models.vision_transformer import (
            ParallelScalingBlock,
            ParallelThingsBlock,
            ResPostBlock,
        )
    except ImportError:
        return None
    args: dict[str, Any] = {}
    if cfg.parallel:
        args["block_fn"] = ParallelScalingBlock
    elif cfg.branches > 1:
        args["block_fn"] = partial(ParallelThingsBlock, num_parallel=cfg.branches)
    elif cfg.res_post_norm:
        args["block_fn"] = ResPostBlock
    if cfg.norm != "layernorm" or cfg.norm_eps != 1e-6:  # timm's own LayerNorm eps otherwise
        args["norm_layer"] = _norm_layer(cfg)
    return args


COMMON_NAME = "vit_base_patch16_224"  # any plain ViT name: every size is given beside it


def setting_words(key: str, value: Any) -> str:
    """'6 heads', 'mean pooling', 'GELU (tanh)', 'fc_norm', 'a table without the prefix'."""
    if key == "heads":
        return f"{value} heads"
    if key == "global_pool":
        return POOL_WORDS.get(value, f"pooling {value!r}")
    if key == "activation":
        return ACT_NAMES.get(value, str(value))
    if key == "fc_norm":
        return "fc_norm" if value else "no fc_norm"
    return f"{key} {value}"
