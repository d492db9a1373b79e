"""timm's ConViT (``convit_tiny``, ``convit_small``, ``convit_base``): a bare state dict (.pth or
.safetensors) or timm's folder (``config.json`` + ``model.safetensors``, ``save_for_hf``).

Keys: ``cls_token`` (1, 1, D), ``pos_embed`` (1, P, D) (patches only), ``patch_embed.proj``,
``blocks.{i}.{norm1, attn.qk, attn.v, attn.pos_proj, attn.gating_param, attn.proj, norm2,
mlp.fc1, mlp.fc2}`` for the GPSA blocks (timm's ``local_up_to_layer`` of them: read off the
keys), ``blocks.{i}.{norm1, attn.qkv, attn.proj, norm2, mlp.fc1, mlp.fc2}`` after them,
``norm``, ``head``. What the weights don't say is timm's for every ConViT: LayerNorm eps 1e-6,
GELU, CLS pooling; the heads are the gates' count. The grid must be square (GPSA's offsets).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from torch import Tensor

from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.families.base import Conversion, Family, FamilyInfo, Source
from vitviz.checkpoints.families.common import (
    Taker,
    block_indices,
    check_depth,
    timm_crop,
)
from vitviz.checkpoints.families.timm_library import timm_reference
from vitviz.checkpoints.library_check import Reference
from vitviz.kinds.convit.config import ConvitConfig
from vitviz.kinds.timm_family import (
    check_table,
    refuse_model_args,
    settings_config,
    table_image_size,
    take_linear,
    take_stem_and_head,
    timm_conversion,
)

LOOKS_LIKE = "a timm ConViT"
# model_args the weights already show (sizes), or that only change the initialisation or
# training: anything else changes the computation and is refused by name.
_SIZE_ARGS = {
    "img_size", "num_classes", "in_chans", "pretrained", "patch_size", "embed_dim", "depth",
    "num_heads", "mlp_ratio", "qkv_bias", "local_up_to_layer", "locality_strength",
    "drop_rate", "pos_drop_rate", "proj_drop_rate", "attn_drop_rate", "drop_path_rate",
}  # fmt: skip
_GPSA = ("attn.qk", "attn.v")
_PLAIN = ("attn.qkv",)
_COMMON = ("norm1", "attn.proj", "norm2", "mlp.fc1", "mlp.fc2")
# timm's default_cfg of every ConViT: ImageNet mean and std, crop 0.875, bicubic.
CONVIT_DEFAULTS = timm_crop(0.875)
_FIELDS = frozenset(f.name for f in dataclasses.fields(ConvitConfig))
# timm's ConViTs by (width, heads, depth, GPSA depth)
_NAMES = {
    (192, 4, 12, 10): "convit_tiny",
    (432, 9, 12, 10): "convit_small",
    (768, 16, 12, 10): "convit_base",
}

LIBRARY_MODEL = timm_reference()  # timm's ConVit over its ``blocks``, GPSA and plain alike


def detect(source: Source) -> bool:
    s = source.state
    return "blocks.0.attn.gating_param" in s and "blocks.0.attn.pos_proj.weight" in s


def _blocks(t: Taker, out: dict[str, Tensor]) -> tuple[int, int]:
    """Take every block's tensors (our names are timm's); (depth, GPSA depth)."""
    L = check_depth(t.source, block_indices(t.state, r"blocks\.(\d+)\.norm1\.weight$"))
    gpsa = [i for i in range(L) if f"blocks.{i}.attn.gating_param" in t]
    S = len(gpsa)
    if gpsa != list(range(S)) or S == L:
        raise CheckpointError(
            f"{t.source.name} looks like {LOOKS_LIKE}, but its GPSA blocks ({gpsa}) are not "
            f"the first blocks followed by plain ones (of {L})."
        )
    for i in range(L):
        b = f"blocks.{i}."
        for part in _COMMON:
            take_linear(t, b + part, out)
        for part in _GPSA if i < S else _PLAIN:
            take_linear(t, b + part, out, bias=False)
        if i < S:
            take_linear(t, b + "attn.pos_proj", out)
            out[b + "attn.gating_param"] = t.take(b + "attn.gating_param")
    return L, S


def convert(source: Source) -> Conversion:
    cfg = source.timm_config or {}
    args: dict[str, Any] = dict(cfg.get("model_args") or {})
    pretrained: dict[str, Any] = dict(cfg.get("pretrained_cfg") or {})
    refuse_model_args(
        source, args, _SIZE_ARGS, "ConViT", pool_note=" (vitviz's ConViT reads the CLS)",
        pos_embed=True,
    )  # fmt: skip
    t = Taker(source, LOOKS_LIKE)
    out: dict[str, Tensor] = {}
    L, S = _blocks(t, out)
    pos, patch, num_classes = take_stem_and_head(t, out)
    t.refuse_leftovers()

    D, p = patch.shape[0], patch.shape[-1]
    notes = ["timm ConViT: LayerNorm eps 1e-6, GELU and the CLS head, as timm builds every ConViT"]
    size = table_image_size(
        source, args, pretrained, pos.shape[1], p, notes, " (a ConViT's GPSA needs one)."
    )
    heads = int(out["blocks.0.attn.gating_param"].shape[0])
    inferred: dict[str, Any] = dict(
        image_size=size,
        patch_size=p,
        in_channels=patch.shape[1],
        num_classes=num_classes,
        dim=D,
        depth=L,
        gpsa_depth=S,
        heads=heads,
        mlp_hidden_dim=out["blocks.0.mlp.fc1.weight"].shape[0],
        qkv_bias="blocks.0.attn.qk.bias" in out,
        norm_eps=1e-6,
        activation="gelu",
    )
    user = dict(source.user)
    arch = user.pop("arch", None)
    words = ("a ConViT", "ConViT")
    config = settings_config(source, user, inferred, ConvitConfig, _FIELDS, words, validate=True)
    check_table(source, config, pos.shape[1])
    conversion = timm_conversion(
        source,
        family="timm-convit",
        kind="convit",
        config=config,
        state=out,
        num_classes=num_classes,
        defaults=CONVIT_DEFAULTS,
        notes=notes,
        default_word="ConViT",
    )
    named = arch or cfg.get("architecture")
    model_args = {} if arch else dict(args)
    if not named:  # a bare file: timm's convit built with the file's shapes checks ours
        named = _NAMES.get((D, heads, L, S), "convit_tiny")
        model_args = dict(
            embed_dim=D // heads,
            num_heads=heads,
            depth=L,
            local_up_to_layer=S,
            mlp_ratio=config.hidden_dim / D,
            qkv_bias=config.qkv_bias,
            patch_size=p,
            num_classes=num_classes,
        )
    conversion.reference = Reference("timm", str(named), model_args, how=LIBRARY_MODEL)
    return conversion


FAMILY = Family(
    "timm-convit",
    detect,
    convert,
    info=FamilyInfo(
        label="timm ConViT",
        names="convit_tiny, convit_small, convit_base",
        forms="state dict (.pth, .safetensors); timm folder",
        parts=(
            "gated positional self-attention (GPSA) over the patches",
            "plain self-attention over [CLS, patches] in the last blocks",
            "pre-norm blocks",
            "GELU MLP",
            "learnt position table",
            "CLS token joined after the GPSA blocks",
            "Conv2d patch embedding",
        ),
    ),
)
