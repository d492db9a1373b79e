"""timm's PiT (``pit_ti_224``, ``pit_xs_224``, ``pit_s_224``, ``pit_b_224`` and their
``_distilled_`` variants): bare state dicts (.pth, .safetensors) and timm's folders
(config.json + model.safetensors, ``save_for_hf``).

Keys (vitviz's network uses timm's names): ``patch_embed.conv``, ``pos_embed`` (1, D, h, w),
``cls_token`` (1, P, D), ``transformers.{s}.pool.{conv, fc}`` (s > 0),
``transformers.{s}.blocks.{j}.{norm1, attn.qkv, attn.proj, norm2, mlp.fc1, mlp.fc2}``, ``norm``,
``head``, ``head_dist``. The weights say the widths, depths, MLP widths, the stem's kernel, the
pooling's kernel (its stride is one less, as timm ties them), the prefix tokens, the stem's grid
(so the image size, given the stride) and the classes. They don't say the head counts or the
stem's stride: those come from timm's own model of the architecture's name (config.json's
``architecture`` and ``model_args``, or ``--arch``) when timm is importable, else from timm's
definitions of the eight names; a bare file whose shapes are one of those names is recognised as
it (and noted); any other needs ``stage_heads`` and ``stride`` in its settings.
"""

from __future__ import annotations

import re
from functools import partial
from typing import Any

import torch
from torch import nn

from vitviz.checkpoints.errors import CheckpointError, MissingSettingsError
from vitviz.checkpoints.families.base import Conversion, Family, FamilyInfo, Source
from vitviz.checkpoints.families.common import KIND_EXTRAS, timm_crop
from vitviz.checkpoints.families.timm_library import timm_reference
from vitviz.checkpoints.families.timm_names import timm_version
from vitviz.checkpoints.library_check import Reference
from vitviz.core.optional import install_to_open
from vitviz.kinds.numbered_blocks import numbered_stages
from vitviz.kinds.pit.config import PiTConfig
from vitviz.kinds.timm_family import TimmKind, finish_timm_kind

LOOKS_LIKE = "a timm PiT"
_BLOCK = re.compile(r"transformers\.(\d+)\.blocks\.(\d+)\.norm1\.weight$")
# timm's PiT names (without "_distilled"): (stem kernel, stride, widths, depths, heads)
KNOWN: dict[str, tuple[int, int, tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = {
    "pit_ti_224": (16, 8, (64, 128, 256), (2, 6, 4), (2, 4, 8)),
    "pit_xs_224": (16, 8, (96, 192, 384), (2, 6, 4), (2, 4, 8)),
    "pit_s_224": (16, 8, (144, 288, 576), (2, 6, 4), (3, 6, 12)),
    "pit_b_224": (14, 7, (256, 512, 1024), (3, 6, 4), (4, 8, 16)),
}
MLP_RATIO = 4  # every timm PiT's
_DEFAULTS = timm_crop(0.9)
EXTRAS = KIND_EXTRAS


def stage_blocks(model: nn.Module) -> list[nn.Module]:
    """timm's PiT's attention blocks in order: each of its ``transformers``' ``blocks``."""
    return [block for stage in model.transformers for block in stage.blocks]


LIBRARY_MODEL = timm_reference(blocks=stage_blocks)  # timm's PoolingVisionTransformer


def detect(source: Source) -> bool:
    s = source.state
    return "patch_embed.conv.weight" in s and "cls_token" in s and any(_BLOCK.match(k) for k in s)


def _fail(source: Source, what: str) -> CheckpointError:
    return CheckpointError(f"{source.name} looks like {LOOKS_LIKE}, but {what}.")


def _shape(source: Source) -> dict[str, Any]:
    """What the weights say: stages, widths, MLP widths, stem, pooling, prefix, classes."""
    s = source.state
    found = numbered_stages(s, _BLOCK, partial(_fail, source))
    stages = list(found)
    needed = [
        f"transformers.{i}.blocks.0.{part}.weight" for i in stages for part in ("norm1", "mlp.fc1")
    ]
    missing = [k for k in needed if k not in s]
    if missing:
        raise _fail(source, f"it lacks {', '.join(missing[:3])}")
    stem, pos, cls = s["patch_embed.conv.weight"], s.get("pos_embed"), s["cls_token"]
    if stem.ndim != 4 or stem.shape[-1] != stem.shape[-2]:
        raise _fail(source, f"its stem kernel {tuple(stem.shape)} is not square")
    if pos is None or pos.ndim != 4 or cls.ndim != 3:
        raise _fail(source, "its position table is not (1, D, h, w) or its CLS not (1, P, D)")
    pool = s.get("transformers.1.pool.conv.weight")
    head = s.get("head.weight")
    return dict(
        depths=tuple(len(found[i]) for i in stages),
        dims=tuple(int(s[f"transformers.{i}.blocks.0.norm1.weight"].shape[0]) for i in stages),
        mlp_hidden_dims=tuple(
            int(s[f"transformers.{i}.blocks.0.mlp.fc1.weight"].shape[0]) for i in stages
        ),
        in_channels=int(stem.shape[1]),
        patch_size=int(stem.shape[-1]),
        grid=(int(pos.shape[-2]), int(pos.shape[-1])),
        num_tokens=int(cls.shape[1]),
        pool_stride=int(pool.shape[-1]) - 1 if pool is not None else 2,
        qkv_bias="transformers.0.blocks.0.attn.qkv.bias" in s,
        num_classes=int(head.shape[0]) if head is not None else 0,
    )


def recognised(shape: dict[str, Any]) -> str | None:
    """The timm name whose tensors these are (stem, widths, depths, MLP widths, tokens)."""
    for name, (patch, _stride, dims, depths, _heads) in KNOWN.items():
        hidden = tuple(MLP_RATIO * d for d in dims)
        if (patch, dims, depths, hidden) == (
            shape["patch_size"], shape["dims"], shape["depths"], shape["mlp_hidden_dims"],
        ):  # fmt: skip
            return name.replace("_224", "_distilled_224") if shape["num_tokens"] == 2 else name
    return None


def _on_meta(name: str, args: dict[str, Any]) -> nn.Module:
    """timm's ``name`` with the folder's ``args``, built on the meta device to read it."""
    import timm

    kwargs = {k: v for k, v in args.items() if k not in ("pretrained", "img_size")}
    try:
        with torch.device("meta"):
            model = timm.create_model(name, pretrained=False, **kwargs)
    except Exception as exc:  # timm's own error: an unknown name, arguments it refuses
        raise CheckpointError(f"timm can't build {name} ({type(exc).__name__}: {exc})") from exc
    if type(model).__name__ != "PoolingVisionTransformer":
        raise CheckpointError(f"timm's {name} is a {type(model).__name__}, not a PiT")
    return model


def from_timm(name: str, args: dict[str, Any]) -> dict[str, Any]:
    """Heads, strides and eps of timm's own ``name`` (built on the meta device)."""
    model = _on_meta(name, args)
    stages = list(model.transformers)
    first = stages[0].blocks[0]
    return dict(
        heads=tuple(int(st.blocks[0].attn.num_heads) for st in stages),
        stride=int(model.patch_embed.conv.stride[0]),
        pool_stride=int(stages[1].pool.conv.stride[0]) if len(stages) > 1 else 2,
        norm_eps=float(first.norm1.eps),
    )


def _known(name: str) -> dict[str, Any] | None:
    """Heads and stride of one of the eight names, from timm's definitions."""
    entry = KNOWN.get(name.replace("_distilled", ""))
    return None if entry is None else {"stride": entry[1], "heads": entry[4]}


def _settings(
    source: Source, shape: dict[str, Any], name: str | None, args: dict[str, Any]
) -> dict[str, Any]:
    """What the weights don't say, from timm, its definitions, or the user's settings
    (``stage_heads``, ``stride``)."""
    if name and timm_version() is not None:
        return from_timm(name, args)
    if name and not args and _known(name) is not None:
        return _known(name) or {}
    if name:
        raise CheckpointError(f"{source.name}: {install_to_open('timm', name)}.")
    if "heads" in source.user and "stride" in source.user:
        return {}  # the user's own (see ``convert``)
    example = {
        "stage_heads": [max(1, d // 48) for d in shape["dims"]],
        "stride": max(1, shape["patch_size"] // 2),
    }
    raise MissingSettingsError(
        f"{source.name} looks like {LOOKS_LIKE}, but its tensors are none of timm's pit_* names "
        f"and the weights don't say the head counts or the stem's stride. Give the timm name "
        f"with --arch NAME, or both in {source.sidecar_name}, e.g. "
        f'{{"stage_heads": {example["stage_heads"]}, "stride": {example["stride"]}}}.',
        example,
    )


def _name(source: Source, shape: dict[str, Any]) -> tuple[str | None, bool, list[str]]:
    """(the timm name, whether the user gave it, notes): ``--arch``, the folder's
    ``architecture``, or (without the user's heads) the name the tensors are."""
    if "stage_heads" in source.user:  # "heads" is a ViT's one number in the shared check
        source.user["heads"] = source.user.pop("stage_heads")
    user_arch = source.user.pop("arch", None)
    name = user_arch or (source.timm_config or {}).get("architecture")
    notes: list[str] = []
    if name is None and "heads" not in source.user:
        name = recognised(shape)
        if name is not None:
            known = _known(name) or {}
            heads = "-".join(map(str, known.get("heads", ())))
            notes.append(
                f"recognised as timm's {name} from its tensors (heads {heads}, stem stride "
                f"{known.get('stride')} as timm defines it; set stage_heads and stride in "
                f"{source.sidecar_name} or --arch for another)"
            )
    return name, user_arch is not None, notes


def _library_args(config: PiTConfig) -> dict[str, Any] | None:
    """timm's PiT arguments of ``config`` (None where timm has no way to say it: MLP widths
    that are not one ratio of the widths)."""
    ratios = {h / d for h, d in zip(config.mlp_hidden_dims, config.dims, strict=True)}
    if len(ratios) != 1 or config.pool_stride != 2 or config.norm_eps != 1e-6:
        return None
    return dict(
        patch_size=config.patch_size,
        stride=config.stride,
        base_dims=[d // h for d, h in zip(config.dims, config.heads, strict=True)],
        depth=list(config.depths),
        heads=list(config.heads),
        mlp_ratio=ratios.pop(),
        distilled=config.num_tokens == 2,
    )


TIMM = TimmKind("pit", PiTConfig, ("a PiT", "PiT"), "timm-pit", _DEFAULTS)


def convert(source: Source) -> Conversion:
    cfg = source.timm_config or {}
    args: dict[str, Any] = dict(cfg.get("model_args") or {})
    shape = _shape(source)
    name, user_arch, notes = _name(source, shape)
    inferred = {k: v for k, v in shape.items() if k != "grid"}
    inferred.update(_settings(source, shape, name, {} if user_arch else args))
    stride = int(source.user.get("stride", inferred.get("stride", 1)))
    patch = int(shape["patch_size"])
    # the size whose stem grid is the position table's (timm's img_size of this table)
    inferred["image_size"] = tuple((g - 1) * stride + patch for g in shape["grid"])
    conversion = finish_timm_kind(source, TIMM, inferred, shape["num_classes"], notes)
    config = conversion.config
    library = _library_args(config)
    why, words = "", ""
    if library is None:
        why = "timm's PiT has one MLP ratio, pool stride 2 and LayerNorm eps 1e-6 (not this file)"
    else:
        words = (
            ", ".join(
                f"{what} {', '.join(map(str, values))}"
                for what, values in (("widths", config.dims), ("depths", config.depths))
            )
            + f", heads {', '.join(map(str, config.heads))}"
        )
    if isinstance(name, str):  # timm's own model of that name, built as the file has it
        given = {**({} if user_arch else args), **(library or {})}
        conversion.reference = Reference(
            "timm", name, given, words, unexpressible=why, how=LIBRARY_MODEL
        )
    else:  # the user's settings: timm's PiT built with them
        conversion.reference = Reference(
            "timm", "pit_ti_224", library or {}, words, shown_as="PoolingVisionTransformer",
            unexpressible=why, how=LIBRARY_MODEL,
        )  # fmt: skip
    return conversion


def pit_parts(config: PiTConfig) -> tuple[str, ...]:
    """A PiT's parts in words."""
    tokens = "CLS and distillation tokens" if config.num_tokens == 2 else "a CLS token"
    head = (
        "the mean of the head on the CLS and the distillation head on the second token"
        if config.num_tokens == 2
        else "the head on the CLS token"
    )
    k = config.pool_stride
    return (
        f"overlapping Conv2d stem (kernel {config.patch_size}, stride {config.stride})",
        "learned position table on the stem's grid (the input is the trained size)",
        f"{tokens} through every stage",
        f"pooling between stages: depthwise {k + 1}×{k + 1} conv of stride {k} on the patch "
        "grid, Linear on the prefix tokens",
        f"pre-norm blocks (LayerNorm eps {config.norm_eps:g}), fused qkv, GELU MLP",
        f"final LayerNorm on the prefix tokens; {head}",
    )


FAMILY = Family(
    "timm-pit",
    detect,
    convert,
    info=FamilyInfo(
        label="timm PiT",
        names="pit_ti_224, pit_xs_224, pit_s_224, pit_b_224 and their _distilled_ variants",
        forms="state dict (.pth, .safetensors); timm folder",
        parts=(
            "overlapping Conv2d stem and a learned position table",
            "CLS (and distillation) token through every stage",
            "depthwise strided conv pooling between stages (Linear on the prefix tokens)",
            "pre-norm ViT blocks",
            "head on the final-normed CLS (distilled: the mean of both heads)",
        ),
    ),
)
