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
    """``ref`` with the resolved settings that differ from the name's as timm's keywords, and
    the words for them ("6 heads, mean pooling") the check's note shows."""
    cfg = conversion.config
    args = dict(ref.model_args)
    words = []
    for ours, theirs in CHECK_ARGS.items():
        value = getattr(cfg, ours)
        if ours in settings and settings[ours] != value and theirs not in args:
            args[theirs] = value
            words.append(setting_words(ours, value))
    if "global_pool" in args and "fc_norm" not in args:  # timm's fc_norm=None follows the pool
        args["fc_norm"] = cfg.fc_norm
    return dataclasses.replace(ref, model_args=args, settings=", ".join(words))


def common_reference(cfg: Any) -> Reference | None:
    """timm's own VisionTransformer built with every setting vitviz resolved for a bare file no
    timm name has (its widths, depth, tokens, heads, pooling, activation, eps, image size);
    None for settings its keywords can't give (another head width, positions)."""
    if cfg.attn_head_dim is not None or cfg.pos_embed not in ("learned", "none"):
        return None
    args = dict(
        patch_size=cfg.patch_size, embed_dim=cfg.dim, depth=cfg.depth, num_heads=cfg.heads,
        mlp_ratio=cfg.hidden_dim / cfg.dim, qkv_bias=cfg.qkv_bias,
        init_values=1.0 if cfg.layer_scale_init is not None else None,
        class_token=cfg.class_token, reg_tokens=cfg.num_register_tokens,
        no_embed_class=cfg.no_embed_class, pre_norm=cfg.pre_norm, final_norm=cfg.final_norm,
        fc_norm=cfg.fc_norm, global_pool=cfg.global_pool, act_layer=cfg.activation,
        pos_embed="learn" if cfg.pos_embed == "learned" else "none",
    )  # fmt: skip
    if cfg.norm_eps != 1e-6:  # timm's VisionTransformer's own LayerNorm eps otherwise
        args["norm_layer"] = partial(nn.LayerNorm, eps=cfg.norm_eps)
    h, w = cfg.image_size
    words = (
        f"width {cfg.dim}, depth {cfg.depth}, {cfg.heads} heads, "
        f"{POOL_WORDS.get(cfg.global_pool, cfg.global_pool)}{', fc_norm' if cfg.fc_norm else ''}, "
        f"{ACT_NAMES.get(cfg.activation, cfg.activation)}, {h}×{w}"
        + ("" if cfg.norm_eps == 1e-6 else f", LayerNorm eps {cfg.norm_eps:g}")
    )
    return Reference(
        "timm", COMMON_NAME, args, words, shown_as="VisionTransformer", how=LIBRARY_MODEL
    )


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
