"""timm ``Beit`` state dicts (BEiT, BEiT v2; .pth or a timm folder's model.safetensors): a ViT
whose attention adds a learnt relative position bias per head (``attn.relative_position_bias_
table``; vitviz's ``rel_pos_bias``), with q and v biases but none on k, LayerScale
(``gamma_1/2``), usually no absolute position embedding, and mean pooling through ``fc_norm``
(or the CLS token through ``norm``).

The heads are the bias table's columns; the grid it was learnt on is its rows,
(2·gh − 1)(2·gw − 1) + 3 (a square grid is assumed unless the settings give the image size).
A shared bias (``rel_pos_bias.relative_position_bias_table``) is refused by name.

timm's ``Beit`` has no dynamic image size: the library check sets it to each other size
analysed with its ``set_input_size``, which resizes the tables by timm's own interpolation, not
transformers' that vitviz's network follows (DESIGN §3), so such a size is refused there.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.families.base import Conversion, Family, FamilyInfo, Source
from vitviz.checkpoints.families.common import Taker, block_indices, check_depth, finish
from vitviz.checkpoints.families.timm_library import LIBRARY_MODEL
from vitviz.checkpoints.library_check import Reference
from vitviz.checkpoints.preprocessing import timm_preprocessing

LOOKS_LIKE = "a timm BEiT"
TABLE = "blocks.0.attn.relative_position_bias_table"
BEIT_DEFAULTS = {"resize": "crop", "crop_pct": 0.9, "interpolation": "bicubic",
                 "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]}  # fmt: skip


def detect(source: Source) -> bool:
    s = source.state
    shared = "rel_pos_bias.relative_position_bias_table" in s
    return "patch_embed.proj.weight" in s and (TABLE in s or shared)


def _grid(rows: int) -> tuple[int, int]:
    side = (math.isqrt(rows - 3) + 1) // 2
    if (2 * side - 1) ** 2 + 3 != rows:
        raise CheckpointError(f"a relative position table of {rows} rows is not a square grid's")
    return side, side


def convert(source: Source) -> Conversion:
    if "rel_pos_bias.relative_position_bias_table" in source.state:
        raise CheckpointError(
            f"{source.name}: a BEiT with one relative position bias shared by every layer is "
            "not supported (only the per-layer tables)"
        )
    t = Taker(source, LOOKS_LIKE)
    out: dict[str, Tensor] = {}
    depth = check_depth(source, block_indices(t.state, r"blocks\.(\d+)\.attn\.qkv\.weight$"))
    out["cls_token"] = t.take("cls_token")
    out["patch_embed.proj.weight"] = patch = t.take("patch_embed.proj.weight")
    out["patch_embed.proj.bias"] = t.take("patch_embed.proj.bias")
    D, C, p = int(patch.shape[0]), int(patch.shape[1]), int(patch.shape[-1])
    pos = t.maybe("pos_embed")
    if pos is not None:
        out["pos_embed"] = pos
    rows, heads = t.state[TABLE].shape
    layer_scale = "blocks.0.gamma_1" in t.state
    qkv_bias = "blocks.0.attn.q_bias" in t.state
    for i in range(depth):
        b = f"blocks.{i}."
        for name in ("norm1", "attn.proj", "norm2", "mlp.fc1", "mlp.fc2"):
            for part in ("weight", "bias"):
                out[f"{b}{name}.{part}"] = t.take(f"{b}{name}.{part}")
        out[f"{b}attn.qkv.weight"] = t.take(f"{b}attn.qkv.weight")
        if qkv_bias:
            q, v = t.take(f"{b}attn.q_bias"), t.take(f"{b}attn.v_bias")
            out[f"{b}attn.qkv.bias"] = torch.cat([q, torch.zeros_like(q), v])  # no k bias
        out[f"{b}attn.relative_position_bias_table"] = t.take(
            f"{b}attn.relative_position_bias_table"
        )
        t.drop([f"{b}attn.relative_position_index"])  # recomputed from the grid
        if layer_scale:
            out[f"{b}ls1.gamma"] = t.take(f"{b}gamma_1")
            out[f"{b}ls2.gamma"] = t.take(f"{b}gamma_2")
    mean_pool = "fc_norm.weight" in t.state
    norm = "fc_norm" if mean_pool else "norm"
    out[f"{norm}.weight"] = t.take(f"{norm}.weight")
    out[f"{norm}.bias"] = t.take(f"{norm}.bias")
    head = t.maybe("head.weight")
    if head is not None:
        out["head.weight"] = head
        out["head.bias"] = t.take("head.bias")
    t.refuse_leftovers()

    gh, gw = _grid(int(rows))
    hidden = int(out["blocks.0.mlp.fc1.weight"].shape[0])
    inferred: dict[str, Any] = dict(
        image_size=(gh * p, gw * p), patch_size=p, in_channels=C, num_classes=0 if head is None
        else int(head.shape[0]), dim=D, depth=depth, heads=int(heads), mlp_hidden_dim=hidden,
        qkv_bias=qkv_bias, pos_embed="learned" if pos is not None else "none",
        rel_pos_bias=True, layer_scale_init=1.0 if layer_scale else None,
        global_pool="avg" if mean_pool else "token", fc_norm=mean_pool,
        norm_eps=1e-6, activation="gelu",
    )  # fmt: skip
    cfg = source.timm_config or {}
    pretrained = dict(cfg.get("pretrained_cfg") or {})
    prep, notes = timm_preprocessing(pretrained, BEIT_DEFAULTS)
    if not mean_pool:
        notes.append("a final norm and no fc_norm: the CLS token is read (timm's 'token' pool)")
    if not pretrained:
        notes.append("no timm config.json beside the file: BEiT's default preprocessing is used")
    conversion = finish(
        source,
        family="timm-beit",
        looks_like=LOOKS_LIKE,
        inferred=inferred,
        required={},
        state=out,
        class_names=None,
        preprocessing=prep,
        notes=notes,
        imagenet_if_1000=True,
    )
    config = conversion.config
    arch = str(cfg.get("architecture") or "beit_base_patch16_224")
    conversion.reference = Reference("timm", arch, {
        "img_size": tuple(config.image_size), "patch_size": p, "embed_dim": D, "depth": depth,
        "num_heads": int(heads), "mlp_ratio": hidden / D, "qkv_bias": qkv_bias,
        "use_abs_pos_emb": pos is not None, "use_rel_pos_bias": True,
        "use_shared_rel_pos_bias": False, "init_values": 0.1 if layer_scale else None,
        "global_pool": "avg" if mean_pool else "token", "use_fc_norm": mean_pool,
        "num_classes": config.num_classes, "in_chans": C,
    }, how=LIBRARY_MODEL)  # fmt: skip
    return conversion


FAMILY = Family(
    "timm-beit",
    detect,
    convert,
    info=FamilyInfo(
        label="timm BEiT, BEiT v2",
        names="beit_*, beitv2_*",
        forms="state dict (.pth, .safetensors); timm folder",
        parts=(
            "attention with a relative position bias per layer and head",
            "q and v biases",
            "pre-norm blocks",
            "GELU MLP",
            "LayerScale",
            "no absolute positions (or a learnt table)",
            "CLS token",
            "mean pooling through fc_norm, or CLS",
            "Conv2d patch embedding",
        ),
    ),
)
