"""Patch size, image size and input channels of an arbitrary ViT, from its modules and arguments.

The patch embedding is the Conv2d whose stride equals its kernel (the classic layout), else the
arguments say it (``patch_size=16`` beside a Linear patch embedding, as in vit-pytorch), else an
attribute ``patch_size`` on one of the modules, else the model's first Linear layer takes
C·p² inputs (checked by running it). The input channels C come from the first Conv2d (the patch
Conv2d or a stem), else an argument (``in_channels``, ``channels``, ...), else the patch Linear.
The image size is given, else an argument or attribute says it, else ``sizing`` finds it from
the position table or the first size whose forward pass runs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from vitviz.imaging.preprocess import IMAGE_CHANNELS
from vitviz.modelcode.errors import ModelCodeError, setting_hint
from vitviz.modelcode.sizing import check_patch_linear, find_image_size

PATCH_ARGS = ("patch_size", "patch", "patch_sz", "patchsize", "patch_res")
IMAGE_ARGS = ("image_size", "img_size", "input_size", "image_res", "img_res", "resolution")
CHANNEL_ARGS = (
    "in_channels",
    "in_chans",
    "n_channels",
    "num_channels",
    "channels",
    "in_ch",
    "input_channels",
)


@dataclass(frozen=True)
class PatchLayout:
    patch_size: int
    image_size: tuple[int, int]  # (H, W) the model takes
    in_channels: int
    source: str  # how the patch size was found, for the notes
    size_note: str = ""  # how the image size was found: "image size 48 from ...", for the notes
    channels_from: str = ""  # where the channel count came from, for the notes


def as_pair(value: Any) -> tuple[int, int] | None:
    """16 -> (16, 16); [h, w] -> (h, w); anything else (bools, non-positive) -> None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and value > 0:
        return (value, value)
    if (
        isinstance(value, (tuple, list))
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)
    ):
        return (int(value[0]), int(value[1]))
    return None


def _from_args(
    args: Mapping[str, Any], keys: tuple[str, ...]
) -> tuple[tuple[int, int] | None, str]:
    for key in keys:
        pair = as_pair(args.get(key))
        if pair is not None:
            return pair, key
    return None, ""


def patch_conv(model: nn.Module) -> nn.Conv2d | None:
    """The first Conv2d with stride equal to its kernel (and larger than 1), no padding."""
    for module in model.modules():
        if (
            isinstance(module, nn.Conv2d)
            and module.kernel_size == module.stride
            and max(module.kernel_size) > 1
            and module.padding in ((0, 0), "valid")
        ):
            return module
    return None


def first_linear(model: nn.Module) -> nn.Linear | None:
    """The model's first layer with weights, when it is a Linear (norms before it skipped)."""
    for module in list(model.modules())[1:]:
        if next(module.parameters(recurse=False), None) is None:
            continue
        if isinstance(module, nn.Linear):
            return module
        if isinstance(module, (nn.LayerNorm, nn.GroupNorm)):
            continue  # vit-pytorch normalises the flattened patches first
        if type(module).__module__.startswith("torch.nn"):
            return None  # a torch layer that is not a Linear comes first
    return None


def patch_linear(model: nn.Module, channels: int | None) -> tuple[nn.Linear, int, int] | None:
    """(layer, patch p, channels C) when the model's first Linear takes C·p² inputs.

    ``channels`` when known, else RGB (3·p²) then grayscale (p²; 3·p² is never a square, so
    the two can't both fit). The caller checks that the layer really takes the image's
    patches (``sizing``): p² inputs are as often a token width as a patch.
    """
    linear = first_linear(model)
    if linear is None:
        return None
    for c in (channels,) if channels else IMAGE_CHANNELS[::-1]:
        p = math.isqrt(linear.in_features // c)
        if p > 1 and c * p * p == linear.in_features:
            return linear, p, c
    return None


def _attribute(model: nn.Module, names: tuple[str, ...]) -> tuple[tuple[int, int] | None, str]:
    for module in model.modules():
        for name in names:
            pair = as_pair(getattr(module, name, None))
            if pair is not None:
                return pair, name
    return None, ""


def _square(pair: tuple[int, int], where: str) -> int:
    if pair[0] != pair[1]:
        raise ModelCodeError(
            f"the patches are {pair[0]}×{pair[1]} ({where}); vitviz supports square patches"
        )
    return pair[0]


def _patch(
    model: nn.Module, conv: nn.Conv2d | None, args: Mapping[str, Any], channels: int | None
) -> tuple[int, str, tuple[nn.Linear, int, int] | None]:
    """Patch size, where it came from, and (layer, p, C) when it was read from a Linear."""
    if conv is not None:
        patch = _square(conv.kernel_size, "Conv2d kernel")  # type: ignore[arg-type]
        return patch, "Conv2d patch embedding (stride = kernel)", None
    pair, key = _from_args(args, PATCH_ARGS)
    if pair is not None:
        return _square(pair, f"argument {key}"), f"argument {key}", None
    pair, _ = _attribute(model, ("patch_size",))
    if pair is not None:
        return _square(pair, "attribute patch_size"), "attribute patch_size", None
    found = patch_linear(model, channels)
    if found is None:
        takes = f"{channels}·p²" if channels else "C·p² (3·p² RGB or p² grayscale)"
        raise ModelCodeError(
            "could not find the patch size: the model has no Conv2d whose stride equals "
            "its kernel, no patch_size argument or attribute, and its first Linear layer "
            f"does not take {takes} inputs; {setting_hint({'patch_size': 'P'})}"
        )
    linear, p, c = found
    return p, f"the first Linear layer ({linear.in_features} inputs = {c}×{p}×{p})", found


def first_conv(model: nn.Module) -> nn.Conv2d | None:
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            return module
    return None


def stated_channels(
    model: nn.Module, conv: nn.Conv2d | None, args: Mapping[str, Any]
) -> tuple[int | None, str]:
    """Input channels from the first Conv2d (images enter there: the patch Conv2d, or a
    convolutional stem before it), else an argument; (None, '') when only the patch Linear
    can tell. The weights win over an argument: ``channels`` is sometimes a width."""
    stem = first_conv(model)
    if stem is not None:
        return stem.in_channels, "the patch Conv2d" if stem is conv else "the first Conv2d"
    pair, key = _from_args(args, CHANNEL_ARGS)
    if pair:
        return pair[0], f"the argument {key}"
    return None, ""


def _channels(
    stated: tuple[int | None, str], guess: tuple[nn.Linear, int, int] | None
) -> tuple[int, str]:
    """The stated channel count, else the patch Linear's, else 3 (RGB); and where from."""
    if stated[0] is not None:
        return stated[0], stated[1]
    if guess is not None:
        return guess[2], f"the first Linear layer ({guess[0].in_features} inputs)"
    return 3, "nothing said otherwise: RGB assumed"


def _size_text(size: tuple[int, int]) -> str:
    return str(size[0]) if size[0] == size[1] else f"{size[0]}×{size[1]}"


def _stated_size(
    model: nn.Module, args: Mapping[str, Any], given: tuple[int, int] | None, given_by: str
) -> tuple[tuple[int, int] | None, str]:
    """The image size the settings (or checkpoint), an argument or an attribute state, and
    the note."""
    if given is not None:
        return given, f"image size {_size_text(given)} given in {given_by}"
    pair, key = _from_args(args, IMAGE_ARGS)
    if pair is not None:
        return pair, f"image size {_size_text(pair)} from the argument {key}"
    pair, key = _attribute(model, ("image_size", "img_size"))
    if pair is not None:
        return pair, f"image size {_size_text(pair)} from the attribute {key}"
    return None, ""


def find_layout(
    model: nn.Module,
    args: Mapping[str, Any],
    patch_size: int | None = None,
    image_size: tuple[int, int] | None = None,
    file: Path | None = None,
    num_prefix_tokens: int | None = None,
    image_size_from: str = "the settings",
) -> PatchLayout:
    """Patch size, image size and channels; the explicit values win over what is found.

    When nothing states the image size, it is found from the position table or by running
    the model (no gradients; see ``sizing``). ``file`` names lines of it in messages;
    ``num_prefix_tokens`` (the user's) helps read the position table.
    """
    conv = patch_conv(model)
    stated = stated_channels(model, conv, args)
    if patch_size is not None:
        patch, source, guess = patch_size, "given", None
    else:
        patch, source, guess = _patch(model, conv, args, stated[0])
    if guess is None and conv is None:  # a patch Linear of C·p² inputs still tells C
        found = patch_linear(model, stated[0])
        guess = found if found is not None and found[1] == patch else None
    channels, channels_from = _channels(stated, guess)
    if channels not in IMAGE_CHANNELS:
        raise ModelCodeError(
            f"the model takes {channels}-channel inputs (from {channels_from}); vitviz makes "
            "images into 1-channel (grayscale) or 3-channel (RGB) inputs"
        )
    linear = guess[0] if guess is not None else None
    size, size_note = _stated_size(model, args, image_size, image_size_from)
    if size is None:
        width = conv.out_channels if conv is not None else None  # picks the position table
        width = width or (linear.out_features if linear is not None else None)
        found = find_image_size(model, patch, channels, width, num_prefix_tokens, file, linear)
        size, size_note = found.size, found.note
    h, w = size
    if h % patch or w % patch:
        raise ModelCodeError(f"the image size {h}×{w} is not divisible by the patch size {patch}")
    if linear is not None:
        problem = check_patch_linear(model, linear, (h, w), patch, channels, file)
        if problem:
            raise ModelCodeError(
                f"could not find the patch size: {patch} was read from {source}, but {problem}; "
                f"{setting_hint({'patch_size': 'P'})}"
            )
        patches = (h // patch) * (w // patch)
        source += f", checked: it takes the {patches} patches of a {h}×{w} image"
    return PatchLayout(patch, (h, w), channels, source, size_note, channels_from)
