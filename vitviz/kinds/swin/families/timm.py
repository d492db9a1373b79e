"""timm ``SwinTransformer`` and ``SwinTransformerV2`` state dicts (swin_*, swinv2_*, any size),
.pth or model.safetensors, with timm's config.json when it is beside them.

Keys: ``patch_embed.{proj, norm}``, ``layers.{s}.downsample.{norm, reduction}`` (merging at the
start of stage s > 0), ``layers.{s}.blocks.{j}.{norm1, attn.qkv, attn.proj,
attn.relative_position_bias_table, norm2, mlp.fc1, mlp.fc2}``, ``norm``, ``head.fc``. The original
Microsoft layout (merging at the end of a stage, ``head``) and the buffers older files hold
(``relative_position_index``, ``attn_mask``) are read too. timm rolls a map before padding it
and clamps a window to a smaller map per axis. v2 blocks hold ``attn.logit_scale``,
``attn.q_bias``, ``attn.v_bias`` (the key has none) and ``attn.cpb_mlp.{0, 2}``; their window is
not in the weights: it comes from config.json (``model_args``, the architecture's name) or the
settings.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from vitviz.checkpoints.errors import CheckpointError, MissingSettingsError
from vitviz.checkpoints.families.base import Conversion, Family, FamilyInfo, Source
from vitviz.checkpoints.families.common import (
    Taker,
    dropped,
    timm_crop,
)
from vitviz.checkpoints.families.timm_library import no_blocks, timm_reference
from vitviz.checkpoints.families.timm_names import ArchError, timm_version
from vitviz.checkpoints.labels import names_from_timm
from vitviz.checkpoints.library_check import Reference
from vitviz.core.optional import install_to_open
from vitviz.kinds.swin.families.common import (
    BLOCK_PARTS,
    check_numbering,
    finish_swin,
    infer_stages,
    per_stage,
    refuse_leftovers,
    stage_blocks,
    take_block,
)
from vitviz.kinds.swin.families.timm_check import swin_args
from vitviz.kinds.timm_family import timm_preprocessing_noted

LOOKS_LIKE = "a timm Swin Transformer"
_BLOCK = r"layers\.(\d+)\.blocks\.(\d+)\.norm1\.weight$"
_NAMES = {part: (part,) for part in BLOCK_PARTS}
_V2 = ("attn.logit_scale", "attn.cpb_mlp.0.weight", "attn.cpb_mlp.0.bias", "attn.cpb_mlp.2.weight")
_SENTINELS = (".attn.relative_position_bias_table", ".attn.cpb_mlp.0.weight")
_DEFAULTS = timm_crop(0.9)


def timm_layout(state: dict[str, Tensor], model: nn.Module) -> dict[str, Tensor]:
    """The file's tensors as timm's own loading converts them for ``model`` (its module's
    ``checkpoint_filter_fn``: the original layout's merging moved, its computed buffers
    dropped), so an original-layout file is checked too."""
    module = sys.modules[type(model).__module__]
    return module.checkpoint_filter_fn(state, model)


# timm's SwinTransformer, its logits only: its windows' maps aren't vitviz's layout (the kind
# compares no attention either)
LIBRARY_MODEL = timm_reference(blocks=no_blocks, prepare=timm_layout)


def detect(source: Source) -> bool:
    s = source.state
    return "patch_embed.proj.weight" in s and any(
        k.startswith("layers.") and k.endswith(_SENTINELS) for k in s
    )


def _image_size(args: dict[str, Any], pretrained: dict[str, Any]) -> Any:
    if args.get("img_size") is not None:
        return args["img_size"]
    size = pretrained.get("input_size")
    if isinstance(size, (list, tuple)) and len(size) == 3:
        return [int(size[1]), int(size[2])]
    return None


def _v2_windows(
    source: Source, cfg: dict[str, Any], args: dict[str, Any], stages: int
) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
    """A v2's (window, pretrained window) per stage: the settings, config.json's model_args,
    the architecture as timm defines it (``--arch`` or config.json), or, without timm, its name
    (``swinv2_tiny_window8_256``); else the settings must give it (None when they do)."""
    if "window_sizes" in source.user:
        return None, None  # finish_swin takes the user's
    if args.get("window_size") is not None:
        return per_stage(args["window_size"], stages, "window_size", source.name), None
    name = str(source.user.get("arch") or cfg.get("architecture", ""))
    if name:
        try:
            found = v2_windows(name, args)
        except ArchError as exc:
            raise CheckpointError(f"{source.name}: {exc}.") from exc
        if found is not None and len(found[0]) == stages:
            return found
        if re.search(r"window\d+to\d+", name):  # the name alone doesn't say the pretrained ones
            raise CheckpointError(f"{source.name}: {install_to_open('timm', name)}.")
    m = re.search(r"window(\d+)", name)
    if m:
        return (int(m.group(1)),) * stages, None
    per = ", ".join(["W"] * stages)
    raise MissingSettingsError(
        f"{source.name} looks like {LOOKS_LIKE} V2; its weights don't say the window size "
        f"(timm's model name does: swinv2_tiny_window8_256 has 8). Give the name with --arch "
        f'NAME, or the windows in {source.sidecar_name}, e.g. {{"window_sizes": [{per}]}} '
        f"with your model's window W.",
        {"window_sizes": None},
    )


def _size_from_windows(patch: int, windows: tuple[int, ...]) -> int:
    """timm's Swin sizes: the last stage's grid is one window (window 7 -> 224, 12 -> 384)."""
    return int(windows[-1]) * patch * 2 ** (len(windows) - 1)


def convert(source: Source) -> Conversion:
    cfg = source.timm_config or {}
    args: dict[str, Any] = dict(cfg.get("model_args") or {})
    pretrained: dict[str, Any] = dict(cfg.get("pretrained_cfg") or {})
    t = Taker(source, LOOKS_LIKE)
    out: dict[str, Tensor] = {}
    notes: list[str] = []
    computed = ("relative_position_index", ".attn_mask", "relative_coords_table", ".k_bias")
    buffers = [k for k in t.state if k.endswith(computed)]
    t.drop(buffers)
    found = stage_blocks(t.state, _BLOCK)
    check_numbering(source, found, list(range(len(found))))
    original = "layers.0.downsample.reduction.weight" in t  # merging at the end of a stage
    if original:
        notes.append("the original Swin layout (merging at the end of a stage) was read")
    for s, blocks in found.items():
        for j in blocks:
            old, new = f"layers.{s}.blocks.{j}.", f"stages.{s}.blocks.{j}."
            take_block(t, old, new, _NAMES, out)
            table = t.maybe(old + "attn.relative_position_bias_table")
            if table is not None:
                out[new + "attn.relative_position_bias_table"] = table
                continue
            for part in _V2:
                out[new + part] = t.take(old + part)
            q, v = t.maybe(old + "attn.q_bias"), t.maybe(old + "attn.v_bias")
            if q is not None and v is not None:
                out[new + "attn.qkv.bias"] = torch.cat([q, torch.zeros_like(q), v])
        into = s + 1 if original else s
        merge = f"layers.{s}.downsample."
        if merge + "reduction.weight" in t:
            for part in ("norm.weight", "norm.bias", "reduction.weight"):
                out[f"stages.{into}.merge.{part}"] = t.take(merge + part)
    out["patch_embed.proj.weight"] = patch = t.take("patch_embed.proj.weight")  # (D, C, p, p)
    out["patch_embed.proj.bias"] = t.take("patch_embed.proj.bias")
    out["patch_embed.norm.weight"] = t.take("patch_embed.norm.weight")
    out["patch_embed.norm.bias"] = t.take("patch_embed.norm.bias")
    out["norm.weight"] = t.take("norm.weight")
    out["norm.bias"] = t.take("norm.bias")
    num_classes = 0
    if "head.fc.weight" in t or "head.weight" in t:
        out["head.weight"] = t.take("head.fc.weight", "head.weight")
        out["head.bias"] = t.take("head.fc.bias", "head.bias")
        num_classes = out["head.weight"].shape[0]
    refuse_leftovers(t)
    if buffers:
        notes.append(dropped(buffers, "buffers the model computes itself"))

    depths = [len(b) for b in found.values()]
    v2 = "stages.0.blocks.0.attn.logit_scale" in out
    windows, pretrained_windows = (
        _v2_windows(source, cfg, args, len(depths)) if v2 else (None, None)
    )
    inferred = infer_stages(out, depths, windows, where=source.name)
    if v2 and args.get("pretrained_window_sizes") is not None:
        pws = args["pretrained_window_sizes"]
        inferred["pretrained_window_sizes"] = per_stage(pws, len(depths), "pretrained", source.name)
    elif pretrained_windows is not None and pretrained_windows != windows:
        inferred["pretrained_window_sizes"] = pretrained_windows
    size = _image_size(args, pretrained)
    if size is None:
        windows = tuple(inferred.get("window_sizes") or ())
        size = _size_from_windows(patch.shape[-1], windows) if windows else 224
    if _image_size(args, pretrained) is None and "image_size" not in source.user:
        notes.append(
            f"image size {size} assumed (no timm config.json; timm's Swin of window "
            f"{windows[-1] if windows else '?'} is trained at {size}); set image_size in "
            f"{source.sidecar_name} if the model was trained at another size"
        )
    inferred.update(
        image_size=size,
        patch_size=patch.shape[-1],
        in_channels=patch.shape[1],
        num_classes=num_classes,
        norm_eps=1e-5,
        shift_first=True,
        window_clamp="axis",
        pad_image=False,
    )
    prep = timm_preprocessing_noted(source, pretrained, _DEFAULTS, notes, "Swin")
    user_arch = source.user.pop("arch", None)  # read above: not a Swin config field
    named = user_arch or cfg.get("architecture")
    conversion = finish_swin(
        source,
        family="timm-swin",
        inferred=inferred,
        state=out,
        class_names=names_from_timm(cfg, num_classes),
        preprocessing=prep,
        notes=notes,
        imagenet_if_1000=True,
    )
    if isinstance(named, str):  # timm's own model of that name, built as the file has it
        given, words, why = swin_args(conversion.config)
        conversion.reference = Reference(
            "timm",
            named,
            {**({} if user_arch else args), **given},
            words,
            unexpressible=why,
            how=LIBRARY_MODEL,
        )
    return conversion


FAMILY = Family(
    "timm-swin",
    detect,
    convert,
    info=FamilyInfo(
        label="timm Swin, Swin v2",
        names="swin_*, swinv2_* (and the original Microsoft layout)",
        forms="state dict (.pth, .safetensors); timm folder",
        parts=(
            "(shifted) window attention with a relative position bias",
            "v2: cosine attention, continuous position bias, residual post-norm",
            "patch merging between stages",
            "mean pooling",
            "Conv2d patch embedding",
        ),
    ),
)


def v2_windows(
    name: str, model_args: Mapping[str, Any]
) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(window, pretrained window) per stage of timm's Swin V2 ``name``, as timm defines it at
    its own image size (``swinv2_base_window12to16_192to256``: 16s, pretrained 12, 12, 12, 6);
    None when timm is not importable. Raises ArchError for a name timm can't build."""
    if timm_version() is None:
        return None
    import torch

    args = {k: v for k, v in model_args.items() if k not in ("pretrained", "img_size")}
    try:
        import timm

        with torch.device("meta"):
            model = timm.create_model(name, pretrained=False, **args)
        attns = [stage.blocks[0].attn for stage in model.layers]
        windows = tuple(int(a.window_size[0]) for a in attns)
        pretrained = tuple(int(a.pretrained_window_size[0]) for a in attns)
    except Exception as exc:  # timm's own error, or not a Swin V2
        raise ArchError(f"timm can't read the windows of {name} ({type(exc).__name__})") from exc
    return windows, pretrained
