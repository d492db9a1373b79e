"""timm's Hiera (``hiera_tiny_224``, ``hiera_small_224``, ``hiera_base_224``,
``hiera_base_plus_224``, ``hiera_large_224``, ``hiera_huge_224``, ``hiera_small_abswin_256``,
``hiera_base_abswin_256``): bare state dicts (.pth, .safetensors) and timm's folders
(config.json + model.safetensors, ``save_for_hf``).

Keys (vitviz's network uses timm's names): ``patch_embed.proj``, ``pos_embed`` ((1, N, D), or
abswin's (1, D, h, w) with ``pos_embed_win``), ``blocks.{i}.{norm1, proj (a stage's first
block), attn.qkv, attn.proj, ls1.gamma, norm2, mlp.fc1, mlp.fc2, ls2.gamma}``,
``head.{norm, fc}``. The weights say the widths, depths, MLP widths, layer scale, abswin and
its tables, and the classes. They don't say the head counts, which stages attend within mask
units, the q-stride or the norms' eps: those come from timm's own model of the architecture's
name (config.json's ``architecture`` and ``model_args``, or ``--arch``) when timm is
importable, else from timm's definitions of its names (every one: q-stride 2 × 2, mask units
8 × 8, mask-unit attention in stages 1-2, heads doubling per stage); a bare file whose shapes
are one of those names is recognised as it (and noted); any other needs ``stage_heads``.
"""

from __future__ import annotations

import math
import re
from typing import Any

from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from vitviz.checkpoints.errors import CheckpointError, MissingSettingsError
from vitviz.checkpoints.families.base import Conversion, Family, FamilyInfo, Source
from vitviz.checkpoints.families.common import timm_crop
from vitviz.checkpoints.families.timm_library import timm_reference
from vitviz.checkpoints.families.timm_names import timm_version
from vitviz.checkpoints.labels import names_from_timm
from vitviz.checkpoints.library_check import Reference
from vitviz.checkpoints.preprocessing import timm_preprocessing
from vitviz.core.optional import install_to_open
from vitviz.kinds.pyramid.families.common import (
    finish_pyramid,
    timm_name,
    timm_on_meta,
)
from vitviz.kinds.pyramid.families.timm_check import hiera_args, stage_words
from vitviz.kinds.pyramid.hiera_config import HieraConfig

LOOKS_LIKE = "a timm Hiera"
_BLOCK = re.compile(r"blocks\.(\d+)\.norm1\.weight$")
# timm's Hiera names: (first width, depths, first heads, abswin, expand_proj) -> image size
KNOWN: dict[str, tuple[int, tuple[int, ...], int, bool, bool, int]] = {
    "hiera_tiny_224": (96, (1, 2, 7, 2), 1, False, True, 224),
    "hiera_small_224": (96, (1, 2, 11, 2), 1, False, True, 224),
    "hiera_base_224": (96, (2, 3, 16, 3), 1, False, True, 224),
    "hiera_base_plus_224": (112, (2, 3, 16, 3), 2, False, True, 224),
    "hiera_large_224": (144, (2, 6, 36, 4), 2, False, True, 224),
    "hiera_huge_224": (256, (2, 6, 36, 4), 4, False, True, 224),
    "hiera_small_abswin_256": (96, (1, 2, 11, 2), 1, True, False, 256),
    "hiera_base_abswin_256": (96, (2, 3, 16, 3), 1, True, True, 256),
}
_DEFAULTS = timm_crop(0.9)


def mask_unit_probabilities(block: nn.Module, out: list[Tensor]) -> RemovableHandle:
    """A forward hook on a timm Hiera block's ``attn.qkv`` Linear appending its probabilities
    softmax((q·scale)·kᵀ) as timm's eager path forms them from that output (its attention has no
    dropout module to hook), in timm's layout: (B, heads, units, t_q, t_k) within mask units,
    else (B, heads, N_q, N_k), unrolled order."""
    a = block.attn
    a.fused_attn = False

    def hook(_m: nn.Module, inputs: tuple[Tensor, ...], qkv: Tensor) -> None:
        B, N, _ = inputs[0].shape
        h, d, stride = a.heads, a.head_dim, a.q_stride
        if a.use_mask_unit_attn:
            units = N // (stride * a.window_size)
            q, k, _v = qkv.reshape(B, -1, units, 3, h, d).permute(3, 0, 4, 2, 1, 5).unbind(0)
            if stride > 1:
                q = q.view(B, h, units, stride, -1, d).amax(dim=3)
        else:
            q, k, _v = qkv.reshape(B, N, 3, h, d).permute(2, 0, 3, 1, 4).unbind(0)
            if stride > 1:
                q = q.view(B, h, stride, -1, d).amax(dim=2)
        out.append(((q * a.scale) @ k.transpose(-1, -2)).softmax(dim=-1))

    return a.qkv.register_forward_hook(hook)


LIBRARY_MODEL = timm_reference(probabilities=mask_unit_probabilities)  # timm's Hiera


def detect(source: Source) -> bool:
    s = source.state
    arch = str((source.timm_config or {}).get("architecture") or "")
    if arch and not arch.startswith("hiera_"):
        return False  # hieradet_* (SAM 2's) is another architecture
    return (
        "patch_embed.proj.weight" in s
        and "blocks.0.attn.qkv.weight" in s
        and "head.norm.weight" in s
        and "pos_embed" in s
        and "pos_embed_window" not in s
    )


def _shape(source: Source) -> dict[str, Any]:
    """What the weights say: depths, widths, MLP widths, layer scale, abswin, stem, classes."""
    s = source.state
    found = sorted(int(m.group(1)) for k in s if (m := _BLOCK.match(k)))
    if not found or found != list(range(len(found))):
        raise CheckpointError(f"{source.name} looks like {LOOKS_LIKE}, but its blocks are not "
                              "numbered 0..n-1.")  # fmt: skip
    depths: list[int] = []
    dims: list[int] = []
    hidden: list[int] = []
    for i in found:
        d_in = int(s[f"blocks.{i}.norm1.weight"].shape[0])
        d_out = int(s[f"blocks.{i}.norm2.weight"].shape[0])
        if i == 0 or d_in != d_out:
            depths.append(0)
            dims.append(d_out)
            hidden.append(int(s[f"blocks.{i}.mlp.fc1.weight"].shape[0]))
        depths[-1] += 1
    stem = s["patch_embed.proj.weight"]
    head = s.get("head.fc.weight")
    abswin = "pos_embed_win" in s
    pos = s["pos_embed"]
    out = dict(
        depths=tuple(depths),
        dims=tuple(dims),
        mlp_hidden_dims=tuple(hidden),
        layer_scale="blocks.0.ls1.gamma" in s,
        expand_proj=len(depths) == 1 or f"blocks.{depths[0]}.proj.weight" in s,
        abs_win_pos=abswin,
        in_channels=int(stem.shape[1]),
        patch_kernel=int(stem.shape[-1]),
        patch_padding=int(stem.shape[-1]) // 2,
        num_classes=int(head.shape[0]) if head is not None else 0,
    )
    if abswin:
        out["global_pos_size"] = (int(pos.shape[-2]), int(pos.shape[-1]))
        out["mask_unit"] = tuple(int(v) for v in s["pos_embed_win"].shape[-2:])
    return out


def recognised(shape: dict[str, Any]) -> str | None:
    """The timm name whose tensors these are (first width, depths, abswin, expand), or None."""
    for name, (dim, depths, _heads, abswin, expand, _size) in KNOWN.items():
        if (dim, depths, abswin, expand) == (
            shape["dims"][0], shape["depths"], shape["abs_win_pos"], shape["expand_proj"],
        ) and shape["dims"] == tuple(dim * 2**s for s in range(len(depths))):  # fmt: skip
            return name
    return None


def from_timm(name: str, args: dict[str, Any]) -> dict[str, Any]:
    """Heads, mask-unit stages, q-stride, mask unit, stem and eps of timm's own ``name``."""
    model = timm_on_meta(name, args, "Hiera", "Hiera", ("pretrained",))
    if model.q_pool != len(model.stage_ends) - 1:
        steps = len(model.stage_ends) - 1
        raise CheckpointError(
            f"timm's {name} pools queries in {model.q_pool} of its {steps} stage steps; "
            "vitviz's Hiera pools in every one"
        )
    blocks = list(model.blocks)
    starts = [0] + [e + 1 for e in model.stage_ends[:-1]]
    # timm's first block of stage s attends as stage s - 1: stage s's own flag is on the first
    # block of stage s + 1, or on a later block of the last stage (else no block uses it)
    flags = [bool(blocks[0].attn.use_mask_unit_attn)]
    for s in range(1, len(starts)):
        end = model.stage_ends[s]
        nxt = starts[s + 1] if s + 1 < len(starts) else (starts[s] + 1 if end > starts[s] else None)
        flags.append(bool(blocks[nxt].attn.use_mask_unit_attn) if nxt is not None else False)
    conv = model.patch_embed.proj
    return dict(
        heads=tuple(int(blocks[i].attn.heads) for i in starts),
        mask_unit_attn=tuple(flags),
        q_stride=tuple(int(v) for v in model.q_stride),
        mask_unit=tuple(int(v) for v in model.mask_unit_size),
        patch_stride=int(conv.stride[0]),
        patch_padding=int(conv.padding[0]),
        norm_eps=float(blocks[0].norm1.eps),
    )


def _settings(
    source: Source, shape: dict[str, Any], name: str | None, args: dict[str, Any]
) -> dict[str, Any]:
    """What the weights don't say, from timm, its definitions, or the user's ``stage_heads``."""
    if name and timm_version() is not None:
        return from_timm(name, args)
    if name in KNOWN:
        first = KNOWN[name][2]
        return {"heads": tuple(first * 2**s for s in range(len(shape["depths"])))}
    if name:
        raise CheckpointError(f"{source.name}: {install_to_open('timm', name)}.")
    if "heads" in source.user:
        return {}
    example = [max(1, d // 96) for d in shape["dims"]]
    raise MissingSettingsError(
        f"{source.name} looks like {LOOKS_LIKE}, but its tensors are none of timm's hiera names "
        f"and the weights don't say the head counts. Give the timm name with --arch NAME, or the "
        f'heads per stage in {source.sidecar_name}, e.g. {{"stage_heads": {example}}}.',
        {"stage_heads": example},
    )


def _image_size(
    tokens: int | None,
    args: dict[str, Any],
    pretrained: dict[str, Any],
    name: str | None,
    stride: int,
) -> tuple[tuple[int, int], str | None]:
    """The position table's size (a square of √N tokens: it fixes the input), else timm's
    ``img_size`` / input size, else the name's; (224, 224) with a note when nothing says."""
    if tokens is not None and math.isqrt(tokens) ** 2 == tokens:
        side = math.isqrt(tokens) * stride
        return (side, side), None
    given = args.get("img_size")
    if isinstance(given, int):
        return (given, given), None
    if isinstance(given, (list, tuple)) and len(given) == 2:
        return (int(given[0]), int(given[1])), None
    size = pretrained.get("input_size")
    if isinstance(size, (list, tuple)) and len(size) == 3:
        return (int(size[1]), int(size[2])), None
    if name in KNOWN:
        px = KNOWN[name][5]
        return (px, px), None
    return (224, 224), "image size 224 assumed"


def convert(source: Source) -> Conversion:
    cfg = source.timm_config or {}
    args: dict[str, Any] = dict(cfg.get("model_args") or {})
    pretrained: dict[str, Any] = dict(cfg.get("pretrained_cfg") or {})
    shape = _shape(source)
    name, user_arch, notes = timm_name(
        source,
        shape,
        recognised,
        lambda _: "its heads, mask units and q-stride as timm defines them",
    )
    inferred = dict(shape)
    inferred.update(_settings(source, shape, name, {} if user_arch else args))
    tokens = None if shape["abs_win_pos"] else int(source.state["pos_embed"].shape[1])
    size, note = _image_size(tokens, args, pretrained, name, int(inferred.get("patch_stride", 4)))
    inferred["image_size"] = size
    if note and "image_size" not in source.user:
        notes.append(f"{note} (set image_size in {source.sidecar_name} for another)")
    prep, prep_notes = timm_preprocessing(pretrained, _DEFAULTS)
    conversion = finish_pyramid(
        source,
        family="timm-hiera",
        inferred=inferred,
        state=source.state,
        class_names=names_from_timm(cfg, shape["num_classes"]),
        preprocessing=prep,
        notes=notes + prep_notes,
        config_cls=HieraConfig,
    )
    if isinstance(name, str):  # timm's own model of that name, built as the file has it
        heads = bool(user_arch)  # the user's heads beside the user's name
        given, why = hiera_args(conversion.config, heads)
        conversion.reference = Reference(
            "timm", name, {**({} if user_arch else args), **given},
            stage_words(conversion.config, heads), unexpressible=why, how=LIBRARY_MODEL,
        )  # fmt: skip
    return conversion


FAMILY = Family(
    "timm-hiera",
    detect,
    convert,
    info=FamilyInfo(
        label="timm Hiera",
        names="hiera_tiny_224 … hiera_huge_224, hiera_*_abswin_256",
        forms="state dict (.pth, .safetensors); timm folder",
        parts=(
            "Conv2d patch embedding (kernel 7, stride 4)",
            "absolute position table (abswin: resized global + tiled window table)",
            "mask-unit (windowed) attention in the first stages, global after",
            "queries and residual max-pooled 2×2 at each stage's first block",
            "pre-norm blocks, LayerScale (abswin)",
            "LayerNorm of the mean token into the head",
        ),
    ),
)
