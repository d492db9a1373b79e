"""timm's PVT v2 (``pvt_v2_b0`` … ``b5``, ``pvt_v2_b2_li``): bare state dicts (.pth,
.safetensors) and timm's folders (config.json + model.safetensors, ``save_for_hf``).

Keys (vitviz's network uses timm's names): ``patch_embed.{proj, norm}``,
``stages.{s}.downsample.{proj, norm}`` (s > 0), ``stages.{s}.blocks.{j}.{norm1, attn.q, attn.kv,
attn.sr, attn.norm, attn.proj, norm2, mlp.fc1, mlp.dwconv, mlp.fc2}``, ``stages.{s}.norm``,
``head``. The weights say the widths, depths, MLP widths, the key reduction of each stage (the
``attn.sr`` kernel; 1 × 1 with a pool: the linear variant) and the classes. They don't say the
head counts, the norms' eps, the stem's stride or the linear variant's pool size: those come from
timm's own model of the architecture's name (config.json's ``architecture`` and ``model_args``,
or ``--arch``) when timm is importable, else from timm's definitions of the seven names (every one
has heads 1-2-5-8); a bare file whose shapes are one of those seven is recognised as it (and
noted); any other needs ``stage_heads`` in its settings.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from torch import Tensor, nn

from vitviz.checkpoints.errors import CheckpointError, MissingSettingsError
from vitviz.checkpoints.families.base import Conversion, Family, FamilyInfo, Source
from vitviz.checkpoints.families.common import timm_crop
from vitviz.checkpoints.families.timm_library import timm_reference
from vitviz.checkpoints.families.timm_names import timm_version
from vitviz.checkpoints.labels import names_from_timm
from vitviz.checkpoints.library_check import Reference
from vitviz.checkpoints.preprocessing import timm_preprocessing
from vitviz.core.optional import install_to_open
from vitviz.kinds.numbered_blocks import numbered_stages
from vitviz.kinds.pyramid.families.common import (
    finish_pyramid,
    timm_image_size,
    timm_name,
    timm_on_meta,
)
from vitviz.kinds.pyramid.families.timm_check import pvt_args, stage_words

LOOKS_LIKE = "a timm PVT v2"
_BLOCK = re.compile(r"stages\.(\d+)\.blocks\.(\d+)\.norm1\.weight$")
HEADS = (1, 2, 5, 8)  # every timm pvt_v2 name's
# timm's PVT v2 names: (depths, widths, MLP ratios, linear)
KNOWN: dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], bool]] = {
    "pvt_v2_b0": ((2, 2, 2, 2), (32, 64, 160, 256), (8, 8, 4, 4), False),
    "pvt_v2_b1": ((2, 2, 2, 2), (64, 128, 320, 512), (8, 8, 4, 4), False),
    "pvt_v2_b2": ((3, 4, 6, 3), (64, 128, 320, 512), (8, 8, 4, 4), False),
    "pvt_v2_b3": ((3, 4, 18, 3), (64, 128, 320, 512), (8, 8, 4, 4), False),
    "pvt_v2_b4": ((3, 8, 27, 3), (64, 128, 320, 512), (8, 8, 4, 4), False),
    "pvt_v2_b5": ((3, 6, 40, 3), (64, 128, 320, 512), (4, 4, 4, 4), False),
    "pvt_v2_b2_li": ((3, 4, 6, 3), (64, 128, 320, 512), (8, 8, 4, 4), True),
}
_DEFAULTS = timm_crop(0.9)


def stage_blocks(model: nn.Module) -> list[nn.Module]:
    """timm's PVT v2's attention blocks in order: each of its ``stages``' ``blocks``."""
    return [block for stage in model.stages for block in stage.blocks]


LIBRARY_MODEL = timm_reference(blocks=stage_blocks)  # timm's PyramidVisionTransformerV2


def _fail(source: Source) -> Callable[[str], CheckpointError]:
    """A refusal of ``source`` in one line: "... looks like {LOOKS_LIKE}, but {what}."."""
    return lambda what: CheckpointError(f"{source.name} looks like {LOOKS_LIKE}, but {what}.")


def detect(source: Source) -> bool:
    s = source.state
    return "patch_embed.proj.weight" in s and any(
        k.startswith("stages.") and k.endswith(".attn.kv.weight") for k in s
    )


def _shape(source: Source) -> dict[str, Any]:
    """What the weights say: depths, dims, MLP widths, reductions, linear, stem, classes."""
    s = source.state
    found = numbered_stages(s, _BLOCK, _fail(source), some=True, found_word="found stages")
    stages = list(found)
    dims, hidden, srs, linear = [], [], [], []
    for i in stages:
        b = f"stages.{i}.blocks.0."
        dims.append(int(s[b + "norm1.weight"].shape[0]))
        hidden.append(int(s[b + "mlp.fc1.weight"].shape[0]))
        sr = s.get(b + "attn.sr.weight")
        k = 1 if sr is None else int(sr.shape[-1])
        linear.append(sr is not None and k == 1)
        srs.append(k)
    if any(linear) and not all(linear):
        raise CheckpointError(
            f"{source.name} looks like {LOOKS_LIKE}, but only some stages have pooled keys."
        )
    stem = s["patch_embed.proj.weight"]
    down = s.get("stages.1.downsample.proj.weight")
    head = s.get("head.weight")
    return dict(
        depths=tuple(len(found[i]) for i in stages),
        dims=tuple(dims),
        mlp_hidden_dims=tuple(hidden),
        sr_ratios=tuple(1 if all(linear) else k for k in srs),
        linear=all(linear),
        qkv_bias="stages.0.blocks.0.attn.q.bias" in s,
        in_channels=int(stem.shape[1]),
        stem_kernel=int(stem.shape[-1]),
        down_kernel=int(down.shape[-1]) if down is not None else 3,
        num_classes=int(head.shape[0]) if head is not None else 0,
    )


def recognised(shape: dict[str, Any]) -> str | None:
    """The timm name whose tensors these are (depths, widths, MLP widths, linear), or None."""
    for name, (depths, dims, ratios, linear) in KNOWN.items():
        hidden = tuple(d * r for d, r in zip(dims, ratios, strict=True))
        if (depths, dims, hidden, linear) == (
            shape["depths"], shape["dims"], shape["mlp_hidden_dims"], shape["linear"],
        ):  # fmt: skip
            return name
    return None


def from_timm(name: str, args: dict[str, Any]) -> dict[str, Any]:
    """Heads, eps, strides and pool size of timm's own ``name`` (built on the meta device)."""
    model = timm_on_meta(
        name, args, "PyramidVisionTransformerV2", "PVT v2", ("pretrained", "img_size")
    )
    stages = list(model.stages)
    first = stages[0].blocks[0]
    pool = first.attn.pool
    down = stages[1].downsample if len(stages) > 1 else None
    return dict(
        heads=tuple(int(st.blocks[0].attn.num_heads) for st in stages),
        patch_size=int(model.patch_embed.proj.stride[0]),
        down_stride=int(down.proj.stride[0]) if down is not None else 2,
        norm_eps=float(first.norm1.eps),
        embed_eps=float(model.patch_embed.norm.eps),
        pool_size=int(
            pool.output_size if isinstance(pool.output_size, int) else pool.output_size[0]
        )
        if pool is not None
        else 7,
    )


def _settings(
    source: Source, shape: dict[str, Any], name: str | None, args: dict[str, Any]
) -> dict[str, Any]:
    """What the weights don't say, from timm, its definitions, or the user's settings
    (``stage_heads``: one head count per stage)."""
    if name and timm_version() is not None:
        return from_timm(name, args)
    if name in KNOWN:
        heads = args.get("num_heads", HEADS)
        return {"heads": tuple(heads) if isinstance(heads, (list, tuple)) else (heads,) * 4}
    if name:
        raise CheckpointError(f"{source.name}: {install_to_open('timm', name)}.")
    if "heads" in source.user:
        return {}  # the user's stage_heads (see ``convert``)
    example = [max(1, d // 64) for d in shape["dims"]]
    raise MissingSettingsError(
        f"{source.name} looks like {LOOKS_LIKE}, but its tensors are none of timm's pvt_v2 names "
        f"and the weights don't say the head counts. Give the timm name with --arch NAME, or the "
        f'heads per stage in {source.sidecar_name}, e.g. {{"stage_heads": {example}}}.',
        {"stage_heads": example},
    )


def convert(source: Source) -> Conversion:
    cfg = source.timm_config or {}
    args: dict[str, Any] = dict(cfg.get("model_args") or {})
    pretrained: dict[str, Any] = dict(cfg.get("pretrained_cfg") or {})
    shape = _shape(source)
    name, user_arch, notes = timm_name(
        source, shape, recognised, lambda _: f"heads {'-'.join(map(str, HEADS))} as timm defines it"
    )
    inferred = dict(shape)
    inferred.update(_settings(source, shape, name, {} if user_arch else args))
    inferred["image_size"] = timm_image_size(source, pretrained, "PVT v2", notes)
    state: dict[str, Tensor] = source.state
    prep, prep_notes = timm_preprocessing(pretrained, _DEFAULTS)
    notes += prep_notes
    conversion = finish_pyramid(
        source,
        family="timm-pvt-v2",
        inferred=inferred,
        state=state,
        class_names=names_from_timm(cfg, shape["num_classes"]),
        preprocessing=prep,
        notes=notes,
    )
    if isinstance(name, str):  # timm's own model of that name, built as the file has it
        heads = bool(user_arch)  # the user's heads beside the user's name
        given = {**({} if user_arch else args), **pvt_args(conversion.config, heads)}
        words = stage_words(conversion.config, heads)
        conversion.reference = Reference("timm", name, given, words, how=LIBRARY_MODEL)
    return conversion


FAMILY = Family(
    "timm-pvt-v2",
    detect,
    convert,
    info=FamilyInfo(
        label="timm PVT v2",
        names="pvt_v2_b0 … pvt_v2_b5, pvt_v2_b2_li",
        forms="state dict (.pth, .safetensors); timm folder",
        parts=(
            "overlapping Conv2d patch embedding per stage",
            "spatial-reduction attention (strided conv, or pooling in *_li)",
            "pre-norm blocks",
            "MLP with a depthwise 3×3 conv",
            "a LayerNorm per stage",
            "no position table",
            "mean pooling of the last stage",
        ),
    ),
)
