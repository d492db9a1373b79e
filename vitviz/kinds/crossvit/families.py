"""timm's CrossViT (``crossvit_tiny_240``, ``_small_240``, ``_base_240``, ``_9_240``,
``_15_240``, ``_18_240`` and the ``_dagger_`` forms with the conv stem: ``crossvit_9_dagger_240``,
``_15_dagger_240/408``, ``_18_dagger_240/408``): bare state dicts (.pth, .safetensors) and timm's
folders (config.json + model.safetensors, ``save_for_hf``).

Keys (vitviz's network uses timm's names): ``patch_embed.{b}.proj`` (a Conv2d, or the dagger's
``proj.{0,2,4}``), ``pos_embed_{b}`` (1, 1 + N_b, D_b), ``cls_token_{b}``,
``blocks.{k}.blocks.{b}.{j}.{norm1, attn.qkv, attn.proj, norm2, mlp.fc1, mlp.fc2}``,
``blocks.{k}.{projs, revert_projs}.{b}.{0, 2}``, ``blocks.{k}.fusion.{b}.{norm1, attn.wq, wk,
wv, proj}``, ``norm.{b}``, ``head.{b}``. The weights say the widths, the blocks of each branch,
the MLP widths, the stem, the grids and the classes; they don't say the head counts, the patch
sizes of a conv stem nor branch 1's resized size: those come from timm's own model of the name
(config.json's ``architecture`` and ``model_args``, or ``--arch``) when timm is importable, else
from timm's definitions of the names; a bare file whose shapes are one name's is recognised as it
(and noted); any other is refused asking for ``--arch``.
"""

from __future__ import annotations

import re
from typing import Any

import torch
from torch import Tensor, nn

from vitviz.checkpoints.errors import CheckpointError, MissingSettingsError
from vitviz.checkpoints.families.base import Conversion, Family, FamilyInfo, Source
from vitviz.checkpoints.families.common import KIND_EXTRAS, timm_crop
from vitviz.checkpoints.families.timm_library import timm_reference
from vitviz.checkpoints.families.timm_names import timm_version
from vitviz.checkpoints.library_check import Reference
from vitviz.core.optional import install_to_open
from vitviz.kinds.crossvit.config import CrossViTConfig
from vitviz.kinds.timm_family import TimmKind, finish_timm_kind

LOOKS_LIKE = "a timm CrossViT"
_BLOCK = re.compile(r"blocks\.(\d+)\.blocks\.([01])\.(\d+)\.norm1\.weight$")
# timm's CrossViT bases: (widths, blocks per branch in each of 3 multi-scale blocks, heads,
# MLP ratio, conv stem); every one has patches 12 and 16 and branch 1 at 224/240 (384/408)
KNOWN: dict[str, tuple[tuple[int, int], tuple[int, int], int, int, bool]] = {
    "crossvit_tiny": ((96, 192), (1, 4), 3, 4, False),
    "crossvit_small": ((192, 384), (1, 4), 6, 4, False),
    "crossvit_base": ((384, 768), (1, 4), 12, 4, False),
    "crossvit_9": ((128, 256), (1, 3), 4, 3, False),
    "crossvit_15": ((192, 384), (1, 5), 6, 3, False),
    "crossvit_18": ((224, 448), (1, 6), 7, 3, False),
    "crossvit_9_dagger": ((128, 256), (1, 3), 4, 3, True),
    "crossvit_15_dagger": ((192, 384), (1, 5), 6, 3, True),
    "crossvit_18_dagger": ((224, 448), (1, 6), 7, 3, True),
}
SIZES = {"_240": (240, 224), "_408": (408, 384)}  # the name's input and branch 1's size
NAMES = (*(f"{b}_240" for b in KNOWN), "crossvit_15_dagger_408", "crossvit_18_dagger_408")
_DEFAULTS = timm_crop(0.875)
EXTRAS = KIND_EXTRAS


def attention_blocks(model: nn.Module) -> list[nn.Module]:
    """timm's CrossViT's attention blocks in the order they run: per multi-scale block each
    branch's ViT blocks, then its two cross-attention blocks."""
    out: list[nn.Module] = []
    for msb in model.blocks:
        for seq in msb.blocks:
            out.extend(seq)
        out.extend(msb.fusion)
    return out


LIBRARY_MODEL = timm_reference(blocks=attention_blocks)  # timm's CrossVit


def detect(source: Source) -> bool:
    s = source.state
    return "cls_token_1" in s and "pos_embed_0" in s and any(_BLOCK.match(k) for k in s)


def _fail(source: Source, what: str) -> CheckpointError:
    return CheckpointError(f"{source.name} looks like {LOOKS_LIKE}, but {what}.")


def _grid_side(source: Source, pos: Tensor | None, b: int) -> int:
    if pos is None or pos.ndim != 3:
        raise _fail(source, f"its pos_embed_{b} is missing or not (1, 1 + N, D)")
    n = int(pos.shape[1]) - 1
    side = round(n**0.5)
    if side * side != n or side < 1:
        raise _fail(source, f"its pos_embed_{b} holds {n} patches, no square grid")
    return side


def _shape(source: Source) -> dict[str, Any]:
    """What the weights say: widths, blocks, MLP widths, stem, grids, classes."""
    s = source.state
    found: dict[int, dict[int, set[int]]] = {}
    for key in s:
        m = _BLOCK.match(key)
        if m:
            found.setdefault(int(m.group(1)), {}).setdefault(int(m.group(2)), set()).add(
                int(m.group(3))
            )
    blocks = sorted(found)
    if blocks != list(range(len(blocks))) or any(
        sorted(found[k]) != [0, 1] or sorted(js) != list(range(len(js)))
        for k in blocks
        for js in found[k].values()
    ):
        raise _fail(source, "its multi-scale blocks are not numbered 0..n-1 with both branches")
    if "blocks.0.fusion.0.0.norm1.weight" in s:
        raise _fail(source, "its cross-attention has several layers per block, which no timm "
                    "crossvit_* name has and vitviz does not model")  # fmt: skip
    needed = [
        f"blocks.{k}.{part}"
        for k in blocks
        for part in (
            "blocks.0.0.mlp.fc1.weight", "blocks.1.0.mlp.fc1.weight", "fusion.0.norm1.weight",
            "fusion.1.attn.wq.weight", "projs.0.2.weight", "revert_projs.1.2.weight",
        )
    ] + ["norm.0.weight", "norm.1.weight"]  # fmt: skip
    missing = [k for k in needed if k not in s]
    if missing:
        raise _fail(source, f"it lacks {', '.join(missing[:3])}")
    head = s.get("head.0.weight")
    return dict(
        dims=(int(s["norm.0.weight"].shape[0]), int(s["norm.1.weight"].shape[0])),
        block_depths=tuple(tuple(len(found[k][b]) for b in (0, 1)) for k in blocks),
        mlp_hidden_dims=tuple(
            int(s[f"blocks.0.blocks.{b}.0.mlp.fc1.weight"].shape[0]) for b in (0, 1)
        ),
        multi_conv="patch_embed.0.proj.0.weight" in s,
        grids=tuple(_grid_side(source, s.get(f"pos_embed_{b}"), b) for b in (0, 1)),
        qkv_bias="blocks.0.blocks.0.0.attn.qkv.bias" in s,
        num_classes=int(head.shape[0]) if head is not None else 0,
    )  # fmt: skip


def recognised(shape: dict[str, Any]) -> str | None:
    """The timm name whose tensors these are (widths, blocks, MLP widths, stem, image size)."""
    for base, (dims, depths, _heads, ratio, conv) in KNOWN.items():
        hidden = tuple(ratio * d for d in dims)
        if (dims, hidden, conv) != (shape["dims"], shape["mlp_hidden_dims"], shape["multi_conv"]):
            continue
        if shape["block_depths"] != (depths,) * 3:
            continue
        size = 12 * shape["grids"][0]
        suffix = "_408" if size == 408 else "_240"
        name = base + suffix
        return name if name in NAMES else base + "_240"
    return None


def from_timm(source: Source, name: str, args: dict[str, Any]) -> dict[str, Any]:
    """The config fields of timm's own ``name`` with ``args`` (built on the meta device)."""
    import timm

    kwargs = {k: v for k, v in args.items() if k != "pretrained"}
    try:
        with torch.device("meta"):
            model = timm.create_model(name, pretrained=False, **kwargs)
    except Exception as exc:  # timm's own error: an unknown name, arguments it refuses
        raise CheckpointError(f"timm can't build {name} ({type(exc).__name__}: {exc})") from exc
    if type(model).__name__ != "CrossVit":
        raise CheckpointError(f"timm's {name} is a {type(model).__name__}, not a CrossViT")
    if model.num_branches != 2:
        raise _fail(source, f"timm's {name} has {model.num_branches} branches; vitviz models two")
    (h, w), sizes = model.img_size, [tuple(s) for s in model.img_size_scaled]
    if h != w or any(a != b for a, b in sizes):
        raise _fail(source, f"timm's {name} takes a {h}×{w} input; vitviz's CrossViT a square")
    if model.crop_scale and sizes[1] != sizes[0]:
        raise _fail(source, "its branch 1 is a centre crop (crop_scale), which vitviz does "
                    "not model")  # fmt: skip
    first = model.blocks[0]
    if not isinstance(first.fusion[0], nn.Module) or hasattr(first.fusion[0], "__len__"):
        raise _fail(source, "its cross-attention has several layers per block")
    return dict(
        image_size=(h, w),
        branch_sizes=tuple(s[0] for s in sizes),
        patch_sizes=tuple(int(pe.patch_size[0]) for pe in model.patch_embed),
        heads=tuple(int(first.blocks[b][0].attn.num_heads) for b in (0, 1)),
        global_pool=str(model.global_pool),
        norm_eps=float(model.norm[0].eps),
    )


def _known(name: str, grid0: int) -> dict[str, Any] | None:
    """The fields timm's definitions give ``name`` (no arguments), at the file's grid."""
    base, suffix = name[:-4], name[-4:]
    if base not in KNOWN or suffix not in SIZES:
        return None
    size = 12 * grid0
    scale = SIZES[suffix][1] / SIZES[suffix][0]
    return dict(
        image_size=(size, size),
        branch_sizes=(size, int(size * scale)),
        patch_sizes=(12, 16),
        heads=(KNOWN[base][2],) * 2,
        global_pool="token",
        norm_eps=1e-6,
    )


def _name(source: Source, shape: dict[str, Any]) -> tuple[str, bool, list[str]]:
    """(the timm name, whether the user gave it, notes): ``--arch``, the folder's
    ``architecture``, or the name the tensors are; a one-line refusal without any."""
    user_arch = source.user.pop("arch", None)
    name = user_arch or (source.timm_config or {}).get("architecture")
    notes: list[str] = []
    if name is None:
        name = recognised(shape)
        if name is None:
            raise MissingSettingsError(
                f"{source.name} looks like {LOOKS_LIKE}, but its tensors are none of timm's "
                f"crossvit_* names and the weights don't say the head counts nor branch 1's "
                f"image size: give the timm name with --arch NAME.",
                {"arch": "crossvit_tiny_240"},
            )
        notes.append(
            f"recognised as timm's {name} from its tensors (heads and branch sizes as timm "
            f"defines it; --arch for another)"
        )
    return str(name), user_arch is not None, notes


TIMM = TimmKind("crossvit", CrossViTConfig, ("a CrossViT", "CrossViT"), "timm-crossvit", _DEFAULTS)


def convert(source: Source) -> Conversion:
    cfg = source.timm_config or {}
    args: dict[str, Any] = dict(cfg.get("model_args") or {})
    shape = _shape(source)
    name, user_arch, notes = _name(source, shape)
    given = {} if user_arch else dict(args)
    stem = source.state.get("patch_embed.0.proj.weight")  # a dagger's stem: timm's 12 px
    size = (int(stem.shape[-1]) if stem is not None else 12) * shape["grids"][0]
    if timm_version() is not None:
        built = dict(given)
        built.setdefault("img_size", size)
        built.setdefault("num_classes", shape["num_classes"])
        fields = from_timm(source, name, built)
    elif not given and (known := _known(name, shape["grids"][0])) is not None:
        fields = known
    else:
        raise CheckpointError(f"{source.name}: {install_to_open('timm', name)}.")
    inferred = {k: v for k, v in shape.items() if k != "grids"}
    inferred.update(fields)
    if "patch_sizes" not in source.user and not shape["multi_conv"]:
        inferred["patch_sizes"] = tuple(
            int(source.state[f"patch_embed.{b}.proj.weight"].shape[-1]) for b in (0, 1)
        )
    conversion = finish_timm_kind(source, TIMM, inferred, shape["num_classes"], notes)
    config = conversion.config
    grids = tuple(config.grid(b)[0] for b in (0, 1))
    if grids != shape["grids"]:
        raise _fail(source, f"its position tables are for {shape['grids'][0]}² and "
                    f"{shape['grids'][1]}² patches; timm's {name} makes {grids[0]}² and "
                    f"{grids[1]}² of a {config.image_size[0]} px input")  # fmt: skip
    ref_args = dict(given)
    ref_args.setdefault("img_size", config.image_size[0])
    conversion.reference = Reference("timm", name, ref_args, how=LIBRARY_MODEL)
    return conversion


def crossvit_parts(config: CrossViTConfig) -> tuple[str, ...]:
    """A CrossViT's parts in words."""
    stem = (
        "conv stem (three convs: the dagger's)"
        if config.multi_conv
        else f"Conv2d patch embeddings of {config.patch_sizes[0]} and {config.patch_sizes[1]} px"
    )
    pool = "CLS token" if config.global_pool == "token" else "patches' mean"
    return (
        f"two branches: the input at {config.branch_sizes[0]} px and resized (bicubic) to "
        f"{config.branch_sizes[1]} px",
        stem,
        "a CLS token and a learned position table per branch",
        f"pre-norm ViT blocks per branch (LayerNorm eps {config.norm_eps:g}), fused qkv, GELU MLP",
        "after each multi-scale block: each branch's CLS projected to the other's width, "
        "cross-attending over the other branch's patches, projected back",
        f"final LayerNorm per branch; the mean of each branch's head on its {pool}",
    )


FAMILY = Family(
    "timm-crossvit",
    detect,
    convert,
    info=FamilyInfo(
        label="timm CrossViT",
        names="crossvit_tiny/small/base_240, crossvit_9/15/18_240 and their _dagger_ forms "
        "(crossvit_15/18_dagger_408 too)",
        forms="state dict (.pth, .safetensors); timm folder",
        parts=(
            "two branches of patch sizes 12 and 16 (branch 1's image resized)",
            "a CLS token and a position table per branch (the dagger: a conv stem)",
            "pre-norm ViT blocks per branch",
            "cross-attention: each branch's CLS over the other branch's patches",
            "the mean of the two branches' heads",
        ),
    ),
)
