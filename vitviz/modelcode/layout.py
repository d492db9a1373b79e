"""Patch size, image size and input channels of an arbitrary ViT, from its modules and arguments.

The patch embedding is the Conv2d whose stride equals its kernel (the classic layout), else the
arguments say it (``patch_size=16`` beside a Linear patch embedding, as in vit-pytorch), else an
attribute ``patch_size`` on one of the modules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torch import nn

from vitviz.modelcode.errors import ModelCodeError

PATCH_ARGS = ("patch_size", "patch", "patch_sz", "patchsize", "patch_res")
IMAGE_ARGS = ("image_size", "img_size", "input_size", "image_res", "img_res", "resolution")
CHANNEL_ARGS = ("in_channels", "in_chans", "channels", "num_channels", "in_ch")


@dataclass(frozen=True)
class PatchLayout:
    patch_size: int
    image_size: tuple[int, int]  # (H, W) the model takes
    in_channels: int
    source: str  # how the patch size was found, for the notes


def _pair(value: Any) -> tuple[int, int] | None:
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
        pair = _pair(args.get(key))
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


def _attribute(model: nn.Module, names: tuple[str, ...]) -> tuple[int, int] | None:
    for module in model.modules():
        for name in names:
            pair = _pair(getattr(module, name, None))
            if pair is not None:
                return pair
    return None


def _square(pair: tuple[int, int], where: str) -> int:
    if pair[0] != pair[1]:
        raise ModelCodeError(
            f"the patches are {pair[0]}×{pair[1]} ({where}); vitviz supports square patches"
        )
    return pair[0]


def find_layout(
    model: nn.Module,
    args: Mapping[str, Any],
    patch_size: int | None = None,
    image_size: tuple[int, int] | None = None,
) -> PatchLayout:
    """Patch size, image size and channels; the explicit values win over what is found."""
    conv = patch_conv(model)
    if patch_size is not None:
        patch, source = patch_size, "given"
    elif conv is not None:
        patch = _square(conv.kernel_size, "Conv2d kernel")  # type: ignore[arg-type]
        source = "Conv2d patch embedding (stride = kernel)"
    else:
        pair, key = _from_args(args, PATCH_ARGS)
        pair = pair or _attribute(model, ("patch_size",))
        if pair is None:
            raise ModelCodeError(
                "could not find the patch size: the model has no Conv2d whose stride equals "
                "its kernel, and no patch_size argument or attribute. Give the patch size in "
                "the settings (patch_size)."
            )
        patch = _square(pair, f"argument {key}" if key else "attribute patch_size")
        source = f"argument {key}" if key else "attribute patch_size"
    if image_size is None:
        pair, _ = _from_args(args, IMAGE_ARGS)
        image_size = pair or _attribute(model, ("image_size", "img_size"))
    if image_size is None:
        raise ModelCodeError(
            "could not find the image size the model takes: no image_size (or img_size) "
            "argument or attribute. Give the image size in the settings (image_size)."
        )
    h, w = image_size
    if h % patch or w % patch:
        raise ModelCodeError(f"the image size {h}×{w} is not divisible by the patch size {patch}")
    if conv is not None:
        channels = conv.in_channels
    else:
        pair, _ = _from_args(args, CHANNEL_ARGS)
        channels = pair[0] if pair else 3
    if channels != 3:
        raise ModelCodeError(
            f"the model takes {channels}-channel images; vitviz feeds RGB images (3 channels)"
        )
    return PatchLayout(patch, (h, w), channels, source)
