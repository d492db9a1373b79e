"""timm's CaiT (``cait_xxs24_224``, ``cait_s24_224``, ...): a bare state dict (.pth or
.safetensors) or timm's folder (``config.json`` + ``model.safetensors``, ``save_for_hf``).

Keys: ``cls_token`` (1, 1, D), ``pos_embed`` (1, P, D) (patches only), ``patch_embed.proj``,
``blocks.{i}.{norm1, attn.qkv, attn.proj_l, attn.proj_w, attn.proj, norm2, mlp.fc1, mlp.fc2}``
with ``gamma_1``/``gamma_2``, ``blocks_token_only.{j}.{norm1, attn.q, attn.k, attn.v,
attn.proj, norm2, mlp.fc1, mlp.fc2}`` with ``gamma_1``/``gamma_2``, ``norm``, ``head``.

What the weights don't say is timm's for every CaiT: LayerNorm eps 1e-6, GELU, CLS pooling.
The heads are the talking-heads mixers' size (``proj_l`` is H × H). Model arguments of a folder
that change the computation are refused by name.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from torch import Tensor, nn

from vitviz.checkpoints.families.base import Conversion, Family, FamilyInfo, Source
from vitviz.checkpoints.families.common import (
    Taker,
    block_indices,
    check_depth,
    timm_crop,
    timm_mlp_ratio,
)
from vitviz.checkpoints.families.timm_library import timm_reference
from vitviz.checkpoints.library_check import Reference
from vitviz.kinds.cait.config import CaitConfig
from vitviz.kinds.timm_family import (
    check_table,
    refuse_model_args,
    settings_config,
    table_image_size,
    take_linear,
    take_stem_and_head,
    timm_conversion,
)

LOOKS_LIKE = "a timm CaiT"
# model_args the weights already show (sizes), or that only change the initialisation or
# training: anything else changes the computation and is refused by name.
_SIZE_ARGS = {
    "img_size", "num_classes", "in_chans", "pretrained", "patch_size", "embed_dim", "depth",
    "depth_token_only", "num_heads", "mlp_ratio", "mlp_ratio_token_only", "qkv_bias",
    "init_values", "drop_rate", "pos_drop_rate", "proj_drop_rate", "attn_drop_rate",
    "drop_path_rate",
}  # fmt: skip
# timm's default_cfg of every CaiT: ImageNet mean and std, the whole image (crop_pct 1), bicubic.
CAIT_DEFAULTS = timm_crop(1.0)
_FIELDS = frozenset(f.name for f in dataclasses.fields(CaitConfig))


def cait_blocks(model: nn.Module) -> list[nn.Module]:
    """timm's CaiT's attention blocks in vitviz's order: its self-attention ``blocks``, then its
    class-attention ``blocks_token_only``."""
    return [*model.blocks, *model.blocks_token_only]


LIBRARY_MODEL = timm_reference(blocks=cait_blocks)  # timm's Cait, read over both kinds of block


def detect(source: Source) -> bool:
    s = source.state
    return "blocks_token_only.0.attn.q.weight" in s and "blocks.0.attn.proj_l.weight" in s


def _block(t: Taker, old: str, new: str, attn: tuple[str, ...], out: dict[str, Tensor]) -> None:
    for part in ("norm1", "norm2", "mlp.fc1", "mlp.fc2", "attn.proj"):
        take_linear(t, f"{old}.{part}", out, f"{new}.{part}")
    for part in attn:
        take_linear(t, f"{old}.attn.{part}", out, f"{new}.attn.{part}", part.startswith("proj"))
    out[f"{new}.ls1.gamma"] = t.take(f"{old}.gamma_1")
    out[f"{new}.ls2.gamma"] = t.take(f"{old}.gamma_2")


def convert(source: Source) -> Conversion:
    cfg = source.timm_config or {}
    args: dict[str, Any] = dict(cfg.get("model_args") or {})
    pretrained: dict[str, Any] = dict(cfg.get("pretrained_cfg") or {})
    refuse_model_args(
        source, args, _SIZE_ARGS, "CaiT", pool_note=" (vitviz's CaiT reads the CLS token)"
    )
    t = Taker(source, LOOKS_LIKE)
    out: dict[str, Tensor] = {}
    S = check_depth(source, block_indices(t.state, r"blocks\.(\d+)\.norm1\.weight$"))
    K = check_depth(source, block_indices(t.state, r"blocks_token_only\.(\d+)\.norm1\.weight$"))
    for i in range(S):
        _block(t, f"blocks.{i}", f"blocks.{i}", ("qkv", "proj_l", "proj_w"), out)
    for j in range(K):
        _block(t, f"blocks_token_only.{j}", f"blocks.{S + j}", ("q", "k", "v"), out)
    pos, patch, num_classes = take_stem_and_head(t, out)
    t.refuse_leftovers()

    D, p = patch.shape[0], patch.shape[-1]
    notes = ["timm CaiT: LayerNorm eps 1e-6, GELU and the CLS head, as timm builds every CaiT"]
    size = table_image_size(
        source, args, pretrained, pos.shape[1], p, notes,
        f"; set image_size in {source.sidecar_name}.",
    )  # fmt: skip
    inferred: dict[str, Any] = dict(
        image_size=size,
        patch_size=p,
        in_channels=patch.shape[1],
        num_classes=num_classes,
        dim=D,
        depth=S + K,
        class_depth=K,
        heads=out["blocks.0.attn.proj_l.weight"].shape[0],
        mlp_hidden_dim=out["blocks.0.mlp.fc1.weight"].shape[0],
        class_mlp_hidden_dim=out[f"blocks.{S}.mlp.fc1.weight"].shape[0],
        qkv_bias="blocks.0.attn.qkv.bias" in out,
        norm_eps=1e-6,
        activation="gelu",
    )
    user = dict(source.user)
    arch = user.pop("arch", None)
    config = settings_config(source, user, inferred, CaitConfig, _FIELDS, ("a CaiT", "CaiT"))
    check_table(source, config, pos.shape[1])
    conversion = timm_conversion(
        source,
        family="timm-cait",
        kind="cait",
        config=config,
        state=out,
        num_classes=num_classes,
        defaults=CAIT_DEFAULTS,
        notes=notes,
        default_word="CaiT",
    )
    named = arch or cfg.get("architecture")
    if not named:
        named = _NAMES.get((D, S, K))
        if named is not None:
            notes.append(f"recognised as timm's {named} by its width and depths")
    given, words = _library_args(config)
    if isinstance(named, str) and re.match(r"cait_", named):  # timm's own model checks ours
        given = {**({} if arch else args), **given}
        conversion.reference = Reference("timm", named, given, words, how=LIBRARY_MODEL)
    elif named is None:  # no name: timm's Cait built with every size the file has
        conversion.reference = Reference(
            "timm", "cait_xxs24_224", given, words, shown_as="Cait", how=LIBRARY_MODEL
        )
    return conversion


def _library_args(config: CaitConfig) -> tuple[dict[str, Any], str]:
    """timm's Cait keywords for the sizes the file's tensors show (the check builds the file's
    model, not the name's defaults), and the words its note says them with."""

    class_hidden = config.class_mlp_hidden_dim or config.hidden_dim
    depth = config.depth - config.class_depth
    args = {
        "patch_size": config.patch_size,
        "embed_dim": config.dim,
        "depth": depth,
        "depth_token_only": config.class_depth,
        "num_heads": config.heads,
        "mlp_ratio": timm_mlp_ratio(config.dim, config.hidden_dim),
        "mlp_ratio_token_only": timm_mlp_ratio(config.dim, class_hidden),
        "qkv_bias": config.qkv_bias,
    }
    words = f"width {config.dim}, {depth} + {config.class_depth} blocks, {config.heads} heads"
    return args, words


# timm's CaiT widths, self-attention depths and class-attention depths by name (the name's
# image size is the pos table's; the check builds it at the checkpoint's own size).
_NAMES = {
    (192, 24, 2): "cait_xxs24_224",
    (192, 36, 2): "cait_xxs36_224",
    (288, 24, 2): "cait_xs24_384",
    (384, 24, 2): "cait_s24_224",
    (384, 36, 2): "cait_s36_384",
    (768, 36, 2): "cait_m36_384",
    (768, 48, 2): "cait_m48_448",
}


FAMILY = Family(
    "timm-cait",
    detect,
    convert,
    info=FamilyInfo(
        label="timm CaiT",
        names="cait_xxs24_224 … cait_m48_448",
        forms="state dict (.pth, .safetensors); timm folder",
        parts=(
            "talking-heads self-attention over the patches",
            "LayerScale",
            "class-attention blocks (the CLS token queries [CLS, patches])",
            "pre-norm blocks",
            "GELU MLP",
            "learnt position table",
            "CLS token joined before the class attention",
            "Conv2d patch embedding",
        ),
    ),
)
