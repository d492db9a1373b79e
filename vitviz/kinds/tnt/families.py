"""timm's TNT (``tnt_s_patch16_224``, ``tnt_b_patch16_224`` and the legacy
``tnt_s_legacy_patch16_224``): bare state dicts (.pth, .safetensors) and timm's folders
(config.json + model.safetensors, ``save_for_hf``).

Keys (vitviz's network uses timm's names): ``pixel_embed.proj``, ``norm1_proj``, ``proj``,
``norm2_proj``, ``cls_token``, ``patch_pos``, ``pixel_pos``, ``blocks.{i}.{norm_in, attn_in.{qk,
v, proj}, norm_mlp_in, mlp_in.{fc1, fc2}, norm1_proj, proj, norm2_proj, norm_out, attn_out.{qk,
v, proj}, norm_mlp, mlp.{fc1, fc2}}``, ``norm``, ``head``. The weights say the depth, the widths,
the pixel sub-grid (``pixel_pos``), the patch grid (``patch_pos``), the legacy layout (a block's
``proj`` with a bias and no ``norm2_proj``), the q/k/v bias, the MLP ratio, the channels and
the classes. They don't say the heads (inner or outer), the patch size or the pixel conv's
stride: a file whose tensors are a timm name's is read as that name (noted), a folder as its
architecture and arguments; any other is refused in one line asking for ``heads`` and
``inner_heads`` (or ``--arch NAME``). The patch size and stride not given are timm's 16 and 4
(noted), checked against the pixel sub-grid.

The original release's key names (``outer_tokens``, ``inner_pos``, ``outer_pos``) are refused
by name (timm converts them on its own load).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.families.base import Conversion, Family, FamilyInfo, Source
from vitviz.checkpoints.families.common import (
    INCEPTION_MEAN,
    INCEPTION_STD,
    KIND_EXTRAS,
    aligned_state,
    read_softmaxes,
    timm_crop,
)
from vitviz.checkpoints.families.reference import LibraryReference
from vitviz.checkpoints.families.timm_library import build_timm, file_state
from vitviz.checkpoints.library_check import Reference
from vitviz.kinds.timm_family import TimmKind, finish_timm_kind, timm_name
from vitviz.kinds.tnt.config import TNTConfig

LOOKS_LIKE = "a timm TNT"
_BLOCK = re.compile(r"blocks\.(\d+)\.norm_out\.weight$")
# timm's names: (embed_dim, inner_dim, depth, outer heads, inner heads, legacy)
KNOWN: dict[str, tuple[int, int, int, int, int, bool]] = {
    "tnt_s_patch16_224": (384, 24, 12, 6, 4, False),
    "tnt_s_legacy_patch16_224": (384, 24, 12, 6, 4, True),
    "tnt_b_patch16_224": (640, 40, 12, 10, 4, False),
}
SHARED: dict[str, Any] = dict(patch_size=16, first_stride=4, norm_eps=1e-5)
_DEFAULTS = timm_crop(0.9, INCEPTION_MEAN, INCEPTION_STD)
EXTRAS = KIND_EXTRAS


def detect(source: Source) -> bool:
    s = source.state
    return "pixel_embed.proj.weight" in s or ("inner_pos" in s and "outer_pos" in s)


def _fail(source: Source, what: str) -> CheckpointError:
    return CheckpointError(f"{source.name} looks like {LOOKS_LIKE}, but {what}.")


def _tensor(source: Source, key: str) -> Tensor:
    t = source.state.get(key)
    if t is None:
        raise _fail(source, f"it lacks {key}")
    return t


def _depth(source: Source) -> int:
    found = {int(m.group(1)) for k in source.state if (m := _BLOCK.match(k))}
    if not found or sorted(found) != list(range(len(found))):
        raise _fail(source, f"its blocks are not numbered 0..n-1 (found {sorted(found)})")
    return len(found)


def _shape(source: Source) -> dict[str, Any]:
    """What the weights say (see the module's docstring)."""
    s = source.state
    if "pixel_embed.proj.weight" not in s:
        raise CheckpointError(
            f"{source.name}: this is the original TNT release's layout (inner_pos, outer_pos), "
            "which vitviz does not read; save it from timm's TNT (which converts it on load)."
        )
    depth = _depth(source)
    stem = _tensor(source, "pixel_embed.proj.weight")
    pixel_pos = _tensor(source, "pixel_pos")
    cls = _tensor(source, "cls_token")
    patch_pos = _tensor(source, "patch_pos")
    if stem.ndim != 4 or tuple(stem.shape[-2:]) != (7, 7):
        raise _fail(source, f"its pixel conv weight is {tuple(stem.shape)}, not a 7×7 Conv2d's")
    if pixel_pos.ndim != 4 or pixel_pos.shape[2] != pixel_pos.shape[3]:
        raise _fail(source, f"its pixel_pos is {tuple(pixel_pos.shape)}, not (1, c, n, n)")
    if cls.ndim != 3 or patch_pos.ndim != 3:
        raise _fail(source, "its cls_token or patch_pos is not (1, tokens, width)")
    side = math.isqrt(int(patch_pos.shape[1]) - 1)
    if side * side != int(patch_pos.shape[1]) - 1:
        raise _fail(source, f"its patch_pos holds {patch_pos.shape[1] - 1} patches, no square")
    C, c = int(cls.shape[-1]), int(pixel_pos.shape[1])
    hidden = int(_tensor(source, "blocks.0.mlp.fc1.weight").shape[0])
    head = s.get("head.weight")
    return dict(
        depths=(depth,),
        dims=(C,),
        inner_dim=c,
        pixels=int(pixel_pos.shape[2]),
        side=side,
        legacy="blocks.0.norm2_proj.weight" not in s,
        qkv_bias="blocks.0.attn_out.qk.bias" in s,
        mlp_ratio=hidden / C,
        in_channels=int(stem.shape[1]),
        num_classes=int(head.shape[0]) if head is not None else 0,
    )


def recognised(shape: Mapping[str, Any]) -> str | None:
    """The timm name whose tensors these are (widths, depth, layout; the sub-grid timm's 4×4)."""
    for name, (C, c, depth, _heads, _inner, legacy) in KNOWN.items():
        if (C, c, (depth,), legacy, shape["pixels"]) == (
            shape["dims"][0], shape["inner_dim"], shape["depths"], shape["legacy"], 4
        ):  # fmt: skip
            return name
    return None


def read_tnt(model: nn.Module, x: Tensor) -> tuple[Tensor, list[Tensor] | None]:
    """timm's logits and each block's inner and outer probabilities, in that order: its
    softmaxes (timm's TNT's only ones)."""
    return read_softmaxes(model, x, 2 * len(model.blocks))


def norm_args(config: TNTConfig) -> dict[str, Any]:
    """timm's TNT's ``norm_layer`` for ``config``'s eps where it is not timm's LayerNorm's
    (a sidecar's or a folder's settings): the library check builds the eps vitviz read."""
    if config.norm_eps == SHARED["norm_eps"]:
        return {}
    return {"norm_layer": partial(nn.LayerNorm, eps=config.norm_eps)}


def timm_args(config: TNTConfig) -> dict[str, Any]:
    """timm's TNT arguments of ``config``."""
    return dict(
        **norm_args(config),
        patch_size=config.patch_size,
        embed_dim=config.embed_dim,
        inner_dim=config.inner_dim,
        depth=config.depths[0],
        num_heads_outer=config.heads[0],
        num_heads_inner=config.inner_heads,
        mlp_ratio=config.mlp_ratio,
        qkv_bias=config.qkv_bias,
        first_stride=config.first_stride,
        legacy=config.legacy,
        global_pool=config.global_pool,
    )


def build_tnt(arch: str, model_args: Mapping[str, Any], cfg: Any, weights: Path) -> nn.Module:
    """timm's ``arch`` (``build_timm``), or, unnamed, timm's TNT of ``model_args``, holding
    the file's tensors."""
    if arch:
        return build_timm(arch, model_args, cfg, weights)
    from timm.models.tnt import TNT

    with torch.device("meta"):
        model = TNT(
            img_size=tuple(cfg.image_size),
            in_chans=cfg.in_channels,
            num_classes=cfg.num_classes,
            **model_args,
        )
    state = aligned_state(file_state(weights))
    model.load_state_dict(state, strict=True, assign=True)
    return model.eval()


LIBRARY_MODEL = LibraryReference(build_tnt, read_tnt)


def _name(source: Source, shape: dict[str, Any]) -> tuple[str | None, bool, list[str]]:
    """(the timm name, whether the user gave it, notes)."""
    return timm_name(source, shape, recognised, KNOWN, "TNT")


def _heads(source: Source, name: str | None, args: Mapping[str, Any]) -> dict[str, Any]:
    """The outer and inner heads the folder's arguments or the timm name say (the user's
    settings go over them later); a one-line refusal asking for those nothing says."""
    known = KNOWN[name.split(".")[0]] if name else None
    outer = args.get("num_heads_outer", known[3] if known else None)
    inner = args.get("num_heads_inner", known[4] if known else None)
    said = {"heads": outer, "inner_heads": inner}
    missing = [k for k, v in said.items() if v is None and k not in source.user]
    if missing:
        raise CheckpointError(
            f"{source.name}: a TNT's weights don't say its heads, and its tensors are none of "
            f"timm's names; give {' and '.join(missing)} in its settings (e.g. "
            f'{{"heads": 6, "inner_heads": 4}}) or --arch NAME.'
        )
    out: dict[str, Any] = {}
    if outer is not None:
        out["heads"] = (int(outer),)
    if inner is not None:
        out["inner_heads"] = int(inner)
    return out


TIMM = TimmKind("tnt", TNTConfig, ("a TNT", "TNT"), "timm-tnt", _DEFAULTS)


def convert(source: Source) -> Conversion:
    cfg = source.timm_config or {}
    args: dict[str, Any] = dict(cfg.get("model_args") or {})
    shape = _shape(source)
    name, user_arch, notes = _name(source, shape)
    given = {} if user_arch else args
    heads = _heads(source, name, given)
    said = {**given, **source.user}  # the user's settings over the folder's
    patch = int(said.get("patch_size", SHARED["patch_size"]))
    stride = int(said.get("first_stride", SHARED["first_stride"]))
    if "patch_size" not in said and name is None:
        notes.append(f"read with timm's patch size {patch} and pixel stride {stride}")
    inferred = {k: v for k, v in shape.items() if k not in ("pixels", "side")}
    inferred.update(
        heads,
        image_size=(shape["side"] * patch,) * 2,
        patch_size=patch,
        first_stride=stride,
        norm_eps=SHARED["norm_eps"],
        global_pool=str(given.get("global_pool") or "token"),
    )
    conversion = finish_timm_kind(source, TIMM, inferred, shape["num_classes"], notes)
    config: TNTConfig = conversion.config
    if config.pixel_grid != (shape["pixels"],) * 2:
        raise _fail(
            source,
            f"its {shape['pixels']}×{shape['pixels']} pixel sub-grid is not what patch size "
            f"{config.patch_size} and pixel stride {config.first_stride} make; give patch_size "
            "and first_stride in its settings",
        )
    eps = f"LayerNorm eps {config.norm_eps:g}" if norm_args(config) else ""
    if isinstance(name, str):  # timm's own model of that name checks ours
        given = {**given, **norm_args(config)}
        conversion.reference = Reference("timm", name, given, eps, how=LIBRARY_MODEL)
    else:  # timm's TNT built with what was read
        conversion.reference = Reference(
            "timm", "", timm_args(config), eps, shown_as="TNT", how=LIBRARY_MODEL
        )
    return conversion


def tnt_parts(config: TNTConfig) -> tuple[str, ...]:
    """A TNT's parts in words."""
    n = "×".join(map(str, config.pixel_grid))
    head = "the CLS token" if config.global_pool == "token" else "the mean of the patch tokens"
    where = "the whole image, cut per patch" if config.legacy else "each patch alone"
    add = (
        "LayerNorm per pixel token, Linear with a bias"
        if config.legacy
        else "LayerNorm over the patch's pixels, Linear, LayerNorm"
    )
    return (
        f"pixel tokens: a 7×7 stride-{config.first_stride} Conv2d over {where}, {n} per "
        f"{config.patch_size}-px patch, + pixel_pos",
        "patch tokens: LayerNorm, Linear, LayerNorm of each patch's pixel tokens; CLS token; "
        "patch_pos",
        f"inner block per patch: {config.inner_heads}-head attention over its pixel tokens, MLP",
        f"the patch's pixel tokens added to its patch token ({add})",
        f"outer block: {config.heads[0]}-head attention over [CLS, patches], MLP",
        f"final LayerNorm; the head on {head}",
    )


FAMILY = Family(
    "timm-tnt",
    detect,
    convert,
    info=FamilyInfo(
        label="timm TNT",
        names="tnt_s_patch16_224, tnt_b_patch16_224, tnt_s_legacy_patch16_224",
        forms="state dict (.pth, .safetensors); timm folder",
        parts=(
            "pixel tokens per patch (7×7 stride-4 conv) with an inner transformer",
            "patch tokens: [CLS, patches] with an outer transformer",
            "each block adds the patch's projected pixel tokens to its patch token",
            "head on the final-normed CLS token",
        ),
    ),
)
