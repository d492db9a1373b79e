"""timm ``SwinTransformerV2Cr`` state dicts (``swinv2_cr_*``: tiny to giant, 224/384, the
``_ns_`` forms), .pth or model.safetensors, with timm's config.json when it is beside them.

Keys: ``patch_embed.{proj, norm}``, ``stages.{s}.downsample.{norm, reduction}`` (merging at the
start of stage s > 0, norm before the reduction), ``stages.{s}.blocks.{j}.{norm1, attn.qkv,
attn.proj, attn.logit_scale (heads,), attn.meta_mlp.{fc1, fc2}, norm2, mlp.fc1, mlp.fc2}``, a
``norm3`` on the blocks that end with an extra norm (every 6th in huge/giant, each stage's last
in the ``_ns_`` forms, always the very last block: there is no final norm) and ``head.fc``.
The window is not in the weights: timm makes it the patch grid ÷ ``window_ratio`` (8) at the
model's image size (224 -> 7, 384 -> 12) unless ``window_size`` is given, so a bare file needs
the image size (``--arch NAME`` or the settings). timm rolls a map before padding it and clamps
a window to a smaller map per axis, as its Swin does.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from torch import Tensor

from vitviz.checkpoints.errors import CheckpointError, MissingSettingsError
from vitviz.checkpoints.families.base import Conversion, Family, FamilyInfo, Source
from vitviz.checkpoints.families.common import (
    Taker,
    dropped,
    timm_crop,
)
from vitviz.checkpoints.labels import names_from_timm
from vitviz.checkpoints.library_check import Reference
from vitviz.kinds.swin.families.common import (
    check_numbering,
    finish_swin,
    refuse_leftovers,
    stage_blocks,
)
from vitviz.kinds.swin.families.timm import LIBRARY_MODEL
from vitviz.kinds.timm_family import timm_preprocessing_noted

LOOKS_LIKE = "a timm SwinV2-CR"
_BLOCK = r"stages\.(\d+)\.blocks\.(\d+)\.norm1\.weight$"
_SENTINEL = ".attn.meta_mlp.fc1.weight"
_PARTS = ("norm1", "attn.qkv", "attn.proj", "attn.meta_mlp.fc1", "attn.meta_mlp.fc2", "norm2")
_PARTS += ("mlp.fc1", "mlp.fc2")
_WINDOW_RATIO = 8  # timm's default: the window is the patch grid ÷ 8
_DEFAULT_ARCH = "swinv2_cr_tiny_224"  # the name the library check builds with the file's shapes
_DEFAULTS = timm_crop(0.9)


def detect(source: Source) -> bool:
    s = source.state
    return "patch_embed.proj.weight" in s and any(
        k.startswith("stages.") and k.endswith(_SENTINEL) for k in s
    )


def _side_pair(value: Any, where: str, what: str) -> tuple[int, int]:
    if isinstance(value, int) and not isinstance(value, bool):
        return value, value
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return int(value[0]), int(value[1])
    raise CheckpointError(f"{where}: {what} {value!r} is not one number or (height, width).")


def _image_size(source: Source, args: dict[str, Any], pretrained: dict[str, Any], name: str):
    """(height, width) the model is built for: the settings, model_args, pretrained_cfg, the
    architecture's name (``swinv2_cr_tiny_384``); None when nothing says it."""
    for value in (source.user.get("image_size"), args.get("img_size")):
        if value is not None:
            return _side_pair(value, source.name, "image_size")
    size = pretrained.get("input_size")
    if isinstance(size, (list, tuple)) and len(size) == 3:
        return int(size[1]), int(size[2])
    m = re.search(r"_(\d+)$", name)
    return (int(m.group(1)),) * 2 if m else None


def _per_stage_windows(value: Any, stages: int, where: str) -> list[tuple[int, int]]:
    """timm's ``window_size``: one int or (h, w) for every stage, or one of either per stage."""
    plain = isinstance(value, (list, tuple)) and len(value) == 2
    if isinstance(value, int) or (plain and all(isinstance(v, int) for v in value)):
        return [_side_pair(value, where, "window_size")] * stages
    if isinstance(value, (list, tuple)) and len(value) == stages:
        return [_side_pair(v, where, "window_size") for v in value]
    raise CheckpointError(f"{where}: window_size {value!r} is not one window or one per stage.")


def stage_windows(
    args: dict[str, Any], size: tuple[int, int], patch: int, stages: int, where: str
) -> tuple[int, ...]:
    """The window of each stage as timm makes it: ``window_size``, else the patch grid (at the
    image size, before any merging) ÷ ``window_ratio``, at least 1. A non-square window is
    refused (vitviz's Swin windows are square)."""
    if args.get("window_size") is not None:
        pairs = _per_stage_windows(args["window_size"], stages, where)
    else:
        ratio = args.get("window_ratio", _WINDOW_RATIO)
        ratios = list(ratio) if isinstance(ratio, (list, tuple)) else [ratio] * stages
        if len(ratios) != stages:
            raise CheckpointError(f"{where}: window_ratio {ratio!r} is not one or one per stage.")
        gh, gw = size[0] // patch, size[1] // patch
        pairs = [(max(1, gh // int(r)), max(1, gw // int(r))) for r in ratios]
    if any(h != w for h, w in pairs):
        shown = ", ".join(f"{h}×{w}" for h, w in pairs)
        raise CheckpointError(
            f"{where}: this SwinV2-CR has non-square windows ({shown}), which vitviz does not "
            f"model."
        )
    return tuple(h for h, _ in pairs)


def _ask_size(source: Source) -> MissingSettingsError:
    return MissingSettingsError(
        f"{source.name} looks like {LOOKS_LIKE}; its weights don't say the image size, which "
        f"sets its windows (swinv2_cr_tiny_224: 224 px, windows of 7; swinv2_cr_tiny_384: "
        f"384 px, windows of 12). Give the name with --arch NAME, or the size in "
        f'{source.sidecar_name}, e.g. {{"image_size": 224}}.',
        {"image_size": 224},
    )


def timm_norm_args(extra: Sequence[int], depths: Sequence[int]) -> dict[str, Any] | None:
    """timm's ``extra_norm_period`` / ``extra_norm_stage`` that put norm3 on exactly the blocks
    ``extra`` (counted over all stages; timm always ends the last stage with one); None when no
    setting of the two does."""
    want = set(extra)
    for stage_end in (False, True):
        for period in range(max(depths) + 1):
            got, start = set(), 0
            for s, depth in enumerate(depths):
                for j in range(depth):
                    i = j + 1
                    last = i == depth and (stage_end or s == len(depths) - 1)
                    if (period and i % period == 0) or last:
                        got.add(start + j)
                start += depth
            if got == want:
                return {"extra_norm_period": period, "extra_norm_stage": stage_end}
    return None


def convert(source: Source) -> Conversion:
    cfg = source.timm_config or {}
    args: dict[str, Any] = dict(cfg.get("model_args") or {})
    pretrained: dict[str, Any] = dict(cfg.get("pretrained_cfg") or {})
    t = Taker(source, LOOKS_LIKE)
    out: dict[str, Tensor] = {}
    notes: list[str] = []
    buffers = [k for k in t.state if k.endswith((".relative_coordinates_log", ".attn_mask"))]
    t.drop(buffers)
    found = stage_blocks(t.state, _BLOCK)
    check_numbering(source, found, list(range(len(found))))
    extra: list[int] = []
    index = 0
    for s, blocks in found.items():
        for j in blocks:
            old, new = f"stages.{s}.blocks.{j}.", f"stages.{s}.blocks.{j}."
            for part in _PARTS:
                for kind in ("weight", "bias"):
                    out[f"{new}{part}.{kind}"] = t.take(f"{old}{part}.{kind}")
            out[new + "attn.logit_scale"] = t.take(old + "attn.logit_scale")
            if old + "norm3.weight" in t:
                out[new + "norm3.weight"] = t.take(old + "norm3.weight")
                out[new + "norm3.bias"] = t.take(old + "norm3.bias")
                extra.append(index)
            index += 1
        merge = f"stages.{s}.downsample."
        if s > 0:
            for part in ("norm.weight", "norm.bias", "reduction.weight"):
                out[f"stages.{s}.merge.{part}"] = t.take(merge + part)
    out["patch_embed.proj.weight"] = patch = t.take("patch_embed.proj.weight")  # (D, C, p, p)
    out["patch_embed.proj.bias"] = t.take("patch_embed.proj.bias")
    out["patch_embed.norm.weight"] = t.take("patch_embed.norm.weight")
    out["patch_embed.norm.bias"] = t.take("patch_embed.norm.bias")
    num_classes = 0
    if "head.fc.weight" in t:
        out["head.weight"] = t.take("head.fc.weight")
        out["head.bias"] = t.take("head.fc.bias")
        num_classes = out["head.weight"].shape[0]
    refuse_leftovers(t)
    if buffers:
        notes.append(dropped(buffers, "buffers the model computes itself"))
    for arg, value in (("always_partition", True), ("global_pool", "")):
        if arg in args and args[arg] == value:
            raise CheckpointError(
                f"{source.name}: this SwinV2-CR has {arg}={value!r}, which vitviz does not model."
            )

    depths = [len(b) for b in found.values()]
    user_arch = source.user.pop("arch", None)  # read here: not a Swin config field
    named = user_arch or cfg.get("architecture")
    size = _image_size(source, args, pretrained, str(named or ""))
    if size is None:
        raise _ask_size(source)
    p = int(patch.shape[-1])
    where = source.name
    dims, heads, hidden, cpb = [], [], [], []
    for s in range(len(depths)):
        b = f"stages.{s}.blocks.0."
        dims.append(int(out[b + "norm1.weight"].shape[0]))
        heads.append(int(out[b + "attn.logit_scale"].shape[0]))
        hidden.append(int(out[b + "mlp.fc1.weight"].shape[0]))
        cpb.append(int(out[b + "attn.meta_mlp.fc1.weight"].shape[0]))
    if len(set(cpb)) > 1:
        raise CheckpointError(f"{where}: position MLPs of different widths ({cpb}) per stage.")
    inferred: dict[str, Any] = dict(
        dims=tuple(dims),
        depths=tuple(depths),
        heads=tuple(heads),
        mlp_hidden_dims=tuple(hidden),
        window_sizes=stage_windows(args, size, p, len(depths), where),
        image_size=size,
        patch_size=p,
        in_channels=int(patch.shape[1]),
        num_classes=num_classes,
        qkv_bias=True,
        norm_eps=1e-5,
        shift_first=True,
        window_clamp="axis",
        pad_image=False,
        version=2,
        cr=True,
        cpb_hidden=cpb[0],
        extra_norm_blocks=tuple(extra),
        final_norm=False,
    )
    prep = timm_preprocessing_noted(source, pretrained, _DEFAULTS, notes, "SwinV2-CR")
    conversion = finish_swin(
        source,
        family="timm-swinv2-cr",
        inferred=inferred,
        state=out,
        class_names=names_from_timm(cfg, num_classes),
        preprocessing=prep,
        notes=notes,
        imagenet_if_1000=True,
    )
    conversion.reference = _reference(conversion, named, user_arch, args, where)
    return conversion


def _reference(
    conversion: Conversion, named: Any, user_arch: Any, args: dict[str, Any], where: str
) -> Reference:
    """timm's own model checks ours: the folder's architecture and model_args as saved, or (a
    bare file, ``--arch``) a swinv2_cr built with the shapes, windows and extra norms read."""
    if isinstance(named, str) and not user_arch:
        return Reference("timm", named, dict(args), how=LIBRARY_MODEL)
    config = conversion.config
    norms = timm_norm_args(config.extra_norm_blocks, config.depths)
    if norms is None:
        raise CheckpointError(
            f"{where}: its extra norms (blocks {list(config.extra_norm_blocks)}) are at places "
            f"timm's swinv2_cr can't put them; refused as not a timm SwinV2-CR."
        )
    built = dict(
        embed_dim=config.dims[0],
        depths=list(config.depths),
        num_heads=list(config.heads),
        mlp_ratio=config.hidden_dim(0) / config.dims[0],
        window_size=[[w, w] for w in config.window_sizes],
        num_classes=config.num_classes,
        **norms,
    )
    arch = user_arch if isinstance(user_arch, str) else _DEFAULT_ARCH
    return Reference(
        "timm", arch, built, settings="the file's shapes, windows and extra norms",
        how=LIBRARY_MODEL,
    )  # fmt: skip


FAMILY = Family(
    "timm-swinv2-cr",
    detect,
    convert,
    info=FamilyInfo(
        label="timm SwinV2-CR",
        names="swinv2_cr_* (tiny to giant, 224/384, _ns_)",
        forms="state dict (.pth, .safetensors); timm folder",
        parts=(
            "scaled cosine window attention, an MLP bias over log-spaced offsets",
            "residual post-norm; extra norms on the main branch",
            "patch merging between stages",
            "mean pooling",
            "Conv2d patch embedding",
        ),
    ),
)
