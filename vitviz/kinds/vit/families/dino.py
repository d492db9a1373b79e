"""Original DINO and DINOv2 checkpoints (facebookresearch): the backbone only.

- Released backbones: timm's block layout (``blocks.N.attn.qkv``, ``ls1.gamma``), DINOv2 with
  ``mask_token`` (dropped) and ``register_tokens``; chunked blocks (``blocks.C.N.``) are
  flattened. DINOv2's position table covers CLS only; registers join after it
  (``pos_embed_prefix = 1``).
- Training checkpoints: ``teacher`` / ``student`` entries (the teacher is used, as DINO's own
  evaluation does) and ``backbone.`` / ``module.`` prefixes; the projection heads are dropped.

Position-table resampling for other image sizes follows the original code: scale factor
(g + 0.1) / g0 without antialias; DINOv2 with registers: to the size, with antialias.
"""

from __future__ import annotations

import re
from typing import Any

from torch import Tensor

from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.families.base import Conversion, Family, FamilyInfo, Source
from vitviz.checkpoints.families.common import (
    Taker,
    block_indices,
    check_depth,
    dropped,
    finish,
    grid_from_table,
    standard_heads,
)
from vitviz.checkpoints.preprocessing import DINO_DEFAULTS
from vitviz.kinds.vit.families.timm import take_blocks, take_patch_embed

_BACKBONES = ("teacher.backbone.", "backbone.", "student.backbone.", "module.backbone.")
_CHUNKED = re.compile(r"^blocks\.\d+\.(\d+)\.")


def _backbone_prefix(state: dict[str, Tensor]) -> str | None:
    for prefix in _BACKBONES:
        if any(k.startswith(prefix + "blocks.") for k in state):
            return prefix
    return None


def detect(source: Source) -> bool:
    s = source.state
    if _backbone_prefix(s) is not None:
        return True
    timm_like = any(k.startswith("blocks.") and ".attn.qkv.weight" in k for k in s)
    if not timm_like:
        return False
    if "mask_token" in s or "register_tokens" in s:
        return True
    named_dino = source.path is not None and "dino" in source.path.name.lower()
    return named_dino and "head.weight" not in s and source.timm_config is None


def _select_backbone(source: Source, notes: list[str]) -> None:
    """Keep only the backbone's tensors, renamed to the released layout (in place)."""
    state = source.state
    wrapped = source.extra.get("wrapped_in") or []
    if "teacher" in wrapped or "student" in wrapped:
        who = "teacher" if "teacher" in wrapped else "student"
        notes.append(f"training checkpoint: the {who}'s backbone is used")
    prefix = _backbone_prefix(state)
    if prefix is not None:
        rest = [k for k in state if not k.startswith(prefix)]
        for k in rest:
            del state[k]
        for k in list(state):
            state[k[len(prefix) :]] = state.pop(k)
        if prefix.startswith("teacher"):
            notes.append("training checkpoint: the teacher's backbone is used")
        elif prefix.startswith("student"):
            notes.append("training checkpoint: the student's backbone is used")
        if rest:
            notes.append(dropped(sorted(rest), "projection heads and training state"))
    chunked = [k for k in state if _CHUNKED.match(k)]
    for k in chunked:  # BlockChunk: blocks.<chunk>.<global index>.
        state[_CHUNKED.sub(lambda m: f"blocks.{m.group(1)}.", k)] = state.pop(k)


def convert(source: Source) -> Conversion:
    notes: list[str] = []
    _select_backbone(source, notes)
    v2 = "mask_token" in source.state or "register_tokens" in source.state
    looks_like = "a DINOv2 backbone" if v2 else "a DINO backbone"
    t = Taker(source, looks_like)
    if any(".mlp.w12." in k for k in t.state):
        raise CheckpointError(
            f"{source.name}: DINOv2 with a SwiGLU MLP (giant) is not supported by vitviz's ViT."
        )
    out: dict[str, Tensor] = {}
    depth = check_depth(source, block_indices(t.state, r"blocks\.(\d+)\.attn\.qkv\.weight$"))
    D, C, p = take_patch_embed(t, out, 3, notes)
    out["cls_token"] = t.take("cls_token")
    regs = t.maybe("register_tokens")
    if regs is not None:
        out["reg_token"] = regs
    out["pos_embed"] = pos = t.take("pos_embed")  # (1, 1 + P, D): CLS + patches
    if t.drop(["mask_token"]):
        notes.append(dropped(["mask_token"], "used only for masked-image pre-training"))
    out["norm.weight"] = t.take("norm.weight")
    out["norm.bias"] = t.take("norm.bias")
    block_info = take_blocks(t, depth, out)
    num_classes = 0
    if "head.weight" in t:
        out["head.weight"] = t.take("head.weight")
        out["head.bias"] = t.take("head.bias")
        num_classes = out["head.weight"].shape[0]
    t.refuse_leftovers()

    inferred: dict[str, Any] = dict(
        patch_size=p,
        in_channels=C,
        dim=D,
        depth=depth,
        num_classes=num_classes,
        num_register_tokens=0 if regs is None else regs.shape[1],
        norm_eps=1e-6,
        activation="gelu",
        pos_embed_interp="bicubic_offset",
        **block_info,
    )
    if regs is not None:
        inferred.update(pos_embed_prefix=1, pos_embed_interp="bicubic_antialias")
    grid = grid_from_table(pos.shape[1] - 1)
    if grid is not None:
        inferred["image_size"] = (grid[0] * p, grid[1] * p)
    if standard_heads(D):
        inferred["heads"] = standard_heads(D)
        if "heads" not in source.user:
            notes.append(
                f"heads {inferred['heads']} assumed (the released models of width "
                f"{D}); set heads in {source.sidecar_name} if yours differs"
            )
    prep = dict(DINO_DEFAULTS)
    size = source.user.get("image_size", inferred.get("image_size", 224))
    h, w = (size, size) if isinstance(size, int) else size
    if min(h, w) < 224 or 224 % p:  # small models: their own size, cropped the same way
        prep["image_size"] = [h, w]
    notes.append(
        f"preprocessing: DINO's evaluation transform (resize, centre crop "
        f"{prep['image_size'][0]}×{prep['image_size'][1]} at crop_pct 0.875, bicubic, "
        f"ImageNet mean/std)"
    )
    return finish(
        source,
        family="dinov2" if v2 else "dino",
        looks_like=looks_like,
        inferred=inferred,
        required={"heads": 6, "image_size": 224},
        state=out,
        class_names=None,
        preprocessing=prep,
        notes=notes,
    )


FAMILY = Family(
    "dino",
    detect,
    convert,
    info=FamilyInfo(
        label="DINO, DINOv2 (facebookresearch)",
        names="released backbones; training checkpoints (teacher / student)",
        forms="state dict (.pth, .safetensors)",
        parts=(
            "attention",
            "pre-norm blocks",
            "GELU MLP",
            "LayerScale (DINOv2)",
            "learnt position table (original resampling)",
            "CLS token, registers",
            "Conv2d patch embedding",
        ),
    ),
)
