"""timm's Twins (``twins_pcpvt_small``, ``_base``, ``_large``; ``twins_svt_small``, ``_base``,
``_large``) on the pyramid kind: bare state dicts (.pth, .safetensors) and timm's folders
(config.json + model.safetensors).

timm's keys -> vitviz's (PVT v2's names): ``patch_embeds.0`` -> ``patch_embed``,
``patch_embeds.{s}`` -> ``stages.{s}.downsample`` (s > 0), ``blocks.{s}.{j}`` ->
``stages.{s}.blocks.{j}`` (``norm1, attn.{q, kv, sr, norm, proj}`` or, an SVT's grouped block,
``attn.{qkv, proj}``; ``norm2, mlp.{fc1, fc2}``), ``pos_block.{s}.proj.0`` ->
``stages.{s}.pos_conv.proj``, ``norm`` -> the last stage's ``norm``, ``head``. The weights say
the widths, depths, MLP widths, key reductions, the patch embeddings' kernels (= their strides:
timm's Twins embeds without overlap), whether blocks are grouped (SVT) and the classes; the
head counts, window sides and eps come from timm's own model of the name (folder's
``architecture``, or ``--arch``) when timm is importable, else from timm's definitions; a bare
file whose shapes are one of the six names is recognised as it (noted); any other needs
``stage_heads`` (and, an SVT, ``windows``).
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
from vitviz.kinds.pyramid.families.timm_check import stage_words, twins_args

LOOKS_LIKE = "a timm Twins"
_BLOCK = re.compile(r"blocks\.(\d+)\.(\d+)\.norm1\.weight$")
_PCPVT = ((64, 128, 320, 512), (512, 1024, 1280, 2048), (1, 2, 5, 8), ())
# timm's Twins names: depths, widths, MLP widths, heads, window sides (SVT)
KNOWN: dict[str, tuple[tuple[int, ...], ...]] = {
    "twins_pcpvt_small": ((3, 4, 6, 3), *_PCPVT),
    "twins_pcpvt_base": ((3, 4, 18, 3), *_PCPVT),
    "twins_pcpvt_large": ((3, 8, 27, 3), *_PCPVT),
    "twins_svt_small": (
        (2, 2, 10, 4), (64, 128, 256, 512), (256, 512, 1024, 2048), (2, 4, 8, 16), (7,) * 4,
    ),
    "twins_svt_base": (
        (2, 2, 18, 2), (96, 192, 384, 768), (384, 768, 1536, 3072), (3, 6, 12, 24), (7,) * 4,
    ),
    "twins_svt_large": (
        (2, 2, 18, 2), (128, 256, 512, 1024), (512, 1024, 2048, 4096), (4, 8, 16, 32), (7,) * 4,
    ),
}  # fmt: skip
_DEFAULTS = timm_crop(0.9)


def twins_blocks(model: nn.Module) -> list[nn.Module]:
    """timm's Twins' attention blocks in order: its ``blocks``, one list per stage."""
    return [block for stage in model.blocks for block in stage]


LIBRARY_MODEL = timm_reference(blocks=twins_blocks)  # timm's Twins


def _fail(source: Source) -> Callable[[str], CheckpointError]:
    """A refusal of ``source`` in one line: "... looks like {LOOKS_LIKE}, but {what}."."""
    return lambda what: CheckpointError(f"{source.name} looks like {LOOKS_LIKE}, but {what}.")


def detect(source: Source) -> bool:
    s = source.state
    return "patch_embeds.0.proj.weight" in s and "pos_block.0.proj.0.weight" in s


def _stages(source: Source) -> dict[int, list[int]]:
    return numbered_stages(
        source.state, _BLOCK, _fail(source), some=True, found_word="found stages"
    )


def _shape(source: Source) -> dict[str, Any]:
    """What the weights say: depths, dims, MLP widths, reductions, kernels, classes."""
    s = source.state
    found = _stages(source)
    dims, hidden, srs = [], [], []
    for i in sorted(found):
        b = f"blocks.{i}.0."
        dims.append(int(s[b + "norm1.weight"].shape[0]))
        hidden.append(int(s[b + "mlp.fc1.weight"].shape[0]))
        sr = [s[f"blocks.{i}.{j}.attn.sr.weight"] for j in sorted(found[i])
              if f"blocks.{i}.{j}.attn.sr.weight" in s]  # fmt: skip
        srs.append(int(sr[0].shape[-1]) if sr else 1)
    stem = s["patch_embeds.0.proj.weight"]
    down = s.get("patch_embeds.1.proj.weight")
    head = s.get("head.weight")
    down_kernel = int(down.shape[-1]) if down is not None else 2
    return dict(
        depths=tuple(len(found[i]) for i in sorted(found)),
        dims=tuple(dims),
        mlp_hidden_dims=tuple(hidden),
        sr_ratios=tuple(srs),
        in_channels=int(stem.shape[1]),
        stem_kernel=int(stem.shape[-1]),
        patch_size=int(stem.shape[-1]),  # timm's Twins embeds patches with kernel = stride
        down_kernel=down_kernel,
        down_stride=down_kernel,
        num_classes=int(head.shape[0]) if head is not None else 0,
        embed_overlap=False,
        mlp_dwconv=False,
        pos_conv=True,
        stage_norms=False,
        svt="blocks.0.0.attn.qkv.weight" in s,  # grouped attention: windows the weights don't say
    )


def recognised(shape: dict[str, Any]) -> str | None:
    """The timm name whose tensors these are (depths, widths, MLP widths), or None."""
    for name, (depths, dims, hidden, _heads, windows) in KNOWN.items():
        if (depths, dims, hidden, bool(windows)) == (
            shape["depths"], shape["dims"], shape["mlp_hidden_dims"], shape["svt"],
        ):  # fmt: skip
            return name
    return None


def from_timm(name: str, args: dict[str, Any]) -> dict[str, Any]:
    """Heads and eps of timm's own ``name`` (built on the meta device)."""
    model = timm_on_meta(name, args, "Twins", "Twins", ("pretrained", "img_size"))
    first = model.blocks[0][0]
    grouped = [getattr(stage[0].attn, "ws", 1) for stage in model.blocks]
    if type(first.attn).__name__ not in ("GlobalSubSampleAttn", "LocallyGroupedAttn"):
        raise CheckpointError(f"timm's {name} has {type(first.attn).__name__} attention")
    return dict(
        heads=tuple(int(stage[0].attn.num_heads) for stage in model.blocks),
        windows=tuple(int(w) for w in grouped) if max(grouped) > 1 else (),
        norm_eps=float(first.norm1.eps),
        embed_eps=float(model.patch_embeds[0].norm.eps),
    )


def _settings(
    source: Source, shape: dict[str, Any], name: str | None, args: dict[str, Any]
) -> dict[str, Any]:
    """What the weights don't say, from timm, its definitions, or ``stage_heads``."""
    if name and timm_version() is not None:
        return from_timm(name, args)
    if name in KNOWN:
        heads = args.get("num_heads", KNOWN[name][3])
        windows = args.get("wss", KNOWN[name][4])
        return {
            "heads": tuple(heads) if isinstance(heads, (list, tuple)) else (heads,) * 4,
            "windows": tuple(windows or ()),
        }
    if name:
        raise CheckpointError(f"{source.name}: {install_to_open('timm', name)}.")
    if "heads" in source.user and (not shape["svt"] or "windows" in source.user):
        return {}  # the user's stage_heads (see ``convert``) and windows
    example = [max(1, d // 64) for d in shape["dims"]]
    raise MissingSettingsError(
        f"{source.name} looks like {LOOKS_LIKE}, but its tensors are none of timm's twins "
        f"names and the weights don't say the head counts"
        + (" or the window sides" if shape["svt"] else "")
        + f". Give the timm name with --arch NAME, or the heads per stage in "
        f'{source.sidecar_name}, e.g. {{"stage_heads": {example}'
        + (', "windows": [7, 7, 7, 7]' if shape["svt"] else "")
        + "}.",
        {"stage_heads": example, **({"windows": [7, 7, 7, 7]} if shape["svt"] else {})},
    )


def renamed(state: dict[str, Tensor], stages: int) -> dict[str, Tensor]:
    """timm's Twins keys -> vitviz's pyramid network's."""
    out: dict[str, Tensor] = {}
    for key, value in state.items():
        new = key
        if key.startswith("patch_embeds.0."):
            new = "patch_embed." + key[len("patch_embeds.0.") :]
        elif m := re.match(r"patch_embeds\.(\d+)\.(.*)$", key):
            new = f"stages.{m.group(1)}.downsample.{m.group(2)}"
        elif m := re.match(r"blocks\.(\d+)\.(\d+)\.(.*)$", key):
            new = f"stages.{m.group(1)}.blocks.{m.group(2)}.{m.group(3)}"
        elif m := re.match(r"pos_block\.(\d+)\.proj\.0\.(.*)$", key):
            new = f"stages.{m.group(1)}.pos_conv.proj.{m.group(2)}"
        elif key.startswith("norm."):
            new = f"stages.{stages - 1}.{key}"
        out[new] = value
    return out


def _whole_windows(source: Source, cfg: Any) -> None:
    """Refuse a Twins-SVT whose input size gives a stage grid that is not whole windows."""
    H, W = (v // cfg.patch_size for v in cfg.image_size)
    for s in range(cfg.num_stages):
        if s:
            H, W = H // cfg.down_stride, W // cfg.down_stride
        ws = cfg.window(s, 0)
        if ws and (H % ws or W % ws):
            raise CheckpointError(
                f"{source.name}: at its input size {cfg.image_size[0]}×{cfg.image_size[1]} "
                f"stage {s + 1}'s {H}×{W} tokens are not whole {ws}×{ws} windows, and timm pads "
                f"them with tokens whose keys take part, which vitviz does not model (set an "
                f"image_size whose stage grids are whole windows, e.g. 224, in "
                f"{source.sidecar_name})"
            )


def convert(source: Source) -> Conversion:
    cfg = source.timm_config or {}
    args: dict[str, Any] = dict(cfg.get("model_args") or {})
    pretrained: dict[str, Any] = dict(cfg.get("pretrained_cfg") or {})
    shape = _shape(source)
    name, user_arch, notes = timm_name(
        source,
        shape,
        recognised,
        lambda found: f"heads {'-'.join(map(str, KNOWN[found][3]))} as timm defines it",
    )
    inferred = dict(shape)
    del inferred["svt"]
    inferred.update(_settings(source, shape, name, {} if user_arch else args))
    inferred["image_size"] = timm_image_size(source, pretrained, "Twins", notes)
    prep, prep_notes = timm_preprocessing(pretrained, _DEFAULTS)
    notes += prep_notes
    conversion = finish_pyramid(
        source,
        family="timm-twins",
        inferred=inferred,
        state=renamed(source.state, len(shape["depths"])),
        class_names=names_from_timm(cfg, shape["num_classes"]),
        preprocessing=prep,
        notes=notes,
    )
    _whole_windows(source, conversion.config)
    if isinstance(name, str):  # timm's own model of that name, built as the file has it
        heads = bool(user_arch)  # the user's heads beside the user's name
        given = {**({} if user_arch else args), **twins_args(conversion.config, heads)}
        words = stage_words(conversion.config, heads)
        conversion.reference = Reference("timm", name, given, words, how=LIBRARY_MODEL)
    return conversion


def twins_parts(cfg: Any) -> tuple[str, ...]:
    """The model info's words for a Twins' parts (config ``cfg``)."""
    sra = "spatial-reduction attention (keys and values from a strided conv + LayerNorm)"
    attention = (
        f"{sra}, alternating with attention within windows of "
        f"{'-'.join(map(str, cfg.windows))} tokens (blocks 1, 3, … of each stage; shown "
        "block-diagonal over the grid)"
        if cfg.windows
        else sra
    )
    return (
        f"non-overlapping conv patch embedding (stride {cfg.patch_size}, then "
        f"{cfg.down_stride} per stage), LayerNorm",
        attention,
        "pre-norm blocks, LayerNorm eps 1e-6",
        "plain MLP (fc1, GELU, fc2)",
        "a position convolution (x + depthwise 3×3 conv) after each stage's first block; "
        "the rollouts pass it as the identity, as they pass the MLP",
        "no position embedding, no CLS token",
        "one LayerNorm at the end; the head reads the mean of the last stage's tokens",
    )


FAMILY = Family(
    "timm-twins",
    detect,
    convert,
    info=FamilyInfo(
        label="timm Twins",
        names="twins_pcpvt_small … _large, twins_svt_small … _large",
        forms="state dict (.pth, .safetensors); timm folder",
        parts=(
            "non-overlapping Conv2d patch embedding per stage",
            "spatial-reduction attention (strided conv)",
            "attention within 7×7 windows every other block (SVT)",
            "pre-norm blocks",
            "plain MLP",
            "a depthwise 3×3 position conv after each stage's first block",
            "one final LayerNorm",
            "mean pooling of the last stage",
        ),
    ),
)
