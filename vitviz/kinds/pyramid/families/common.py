"""Building a pyramid ViT from a converted state dict, and finishing its config with the user's
settings."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from vitviz.checkpoints.assign import assign_exactly
from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.families.base import Conversion, Source
from vitviz.checkpoints.families.common import IMAGENET_MEAN, IMAGENET_STD, KIND_EXTRAS, finish_kind
from vitviz.checkpoints.preprocessing import hf_preprocessing
from vitviz.kinds.pyramid.config import PyramidConfig
from vitviz.kinds.pyramid.hiera_config import HieraConfig
from vitviz.kinds.pyramid.hiera_network import HieraViT
from vitviz.kinds.pyramid.network import PyramidViT

EXTRAS = KIND_EXTRAS


def finish_pyramid(
    source: Source,
    *,
    family: str,
    inferred: dict[str, Any],
    state: dict[str, Tensor],
    class_names: Sequence[str] | None,
    preprocessing: dict[str, Any],
    notes: list[str],
    config_cls: type = PyramidConfig,
) -> Conversion:
    """The user's settings over what the weights said -> ``config_cls`` (PyramidConfig,
    HieraConfig), names, preprocessing."""
    return finish_kind(
        source,
        kind="pyramid",
        config_cls=config_cls,
        words=("a pyramid ViT", "its config fields", family),
        extras=EXTRAS,
        family=family,
        inferred=inferred,
        state=state,
        class_names=class_names,
        preprocessing=preprocessing,
        notes=notes,
        imagenet_if_1000=True,
    )


def build_pyramid(
    config: PyramidConfig | HieraConfig, state: Mapping[str, Tensor]
) -> PyramidViT | HieraViT:
    """A pyramid ViT (PVT v2 or Hiera, by its config) in eval mode holding exactly ``state``;
    CheckpointError naming the misfits."""
    hiera = isinstance(config, HieraConfig)
    with torch.device("meta"):
        model = HieraViT(config) if hiera else PyramidViT(config)
    return assign_exactly(model, state, "Hiera model" if hiera else "PVT v2 model")


def timm_on_meta(
    name: str, args: Mapping[str, Any], class_name: str, label: str, drop: Sequence[str]
) -> torch.nn.Module:
    """timm's own ``name`` with the folder's ``args`` (less ``drop``), built on the meta device
    to read its settings; CheckpointError when timm can't build it or it is no ``class_name``
    (``label``: the words for that class)."""
    import timm

    kwargs = {k: v for k, v in args.items() if k not in drop}
    try:
        with torch.device("meta"):
            model = timm.create_model(name, pretrained=False, **kwargs)
    except Exception as exc:  # timm's own error: an unknown name, arguments it refuses
        raise CheckpointError(f"timm can't build {name} ({type(exc).__name__}: {exc})") from exc
    if type(model).__name__ != class_name:
        raise CheckpointError(f"timm's {name} is a {type(model).__name__}, not a {label}")
    return model


def timm_name(
    source: Source,
    shape: dict[str, Any],
    recognise: Callable[[dict[str, Any]], str | None],
    defines: Callable[[str], str],
) -> tuple[str | None, bool, list[str]]:
    """The timm architecture a pyramid's file is: the user's ``arch``, the folder's
    ``architecture``, or (with no head counts given) the name ``recognise`` finds for its tensor
    ``shape``, with a note naming what timm ``defines`` for it. Returns (name or None, whether
    the user named it, notes). The user's ``stage_heads`` become the shared settings' ``heads``."""
    if "stage_heads" in source.user:  # "heads" is a ViT's one number in the shared settings check
        source.user["heads"] = source.user.pop("stage_heads")
    user_arch = source.user.pop("arch", None)
    name = user_arch or (source.timm_config or {}).get("architecture")
    notes: list[str] = []
    if name is None and "heads" not in source.user:
        name = recognise(shape)
        if name is not None:
            notes.append(
                f"recognised as timm's {name} from its tensors ({defines(name)}; set stage_heads "
                f"in {source.sidecar_name} or --arch for another)"
            )
    return name, user_arch is not None, notes


def timm_image_size(
    source: Source, pretrained: Mapping[str, Any], label: str, notes: list[str]
) -> tuple[int, int]:
    """(H, W) from timm's ``pretrained_cfg`` input size, else 224 with a note in ``notes``
    (``label``: whose default it is) unless the user set one."""
    size = pretrained.get("input_size")
    if isinstance(size, (list, tuple)) and len(size) == 3:
        return (int(size[1]), int(size[2]))
    if "image_size" not in source.user:
        notes.append(
            f"image size 224 assumed (timm's {label} default; any size divisible by the "
            f"stem's stride works; set image_size in {source.sidecar_name} for another)"
        )
    return (224, 224)


def hf_pyramid_preprocessing(
    source: Source, image: tuple[int, int], resample: int, notes: list[str]
) -> tuple[dict[str, Any], list[str]]:
    """A transformers pyramid's preprocessing (``hf_preprocessing``) from its image processor's
    settings (``Source.preprocessor``), or, without them, ImageNet mean and std at the model's
    ``image`` size with PIL ``resample`` (its image processor's default) and a note in
    ``notes``."""
    proc = source.preprocessor
    if proc is None:
        proc = {
            "do_resize": True,
            "size": {"height": image[0], "width": image[1]},
            "resample": resample,
            "image_mean": IMAGENET_MEAN,
            "image_std": IMAGENET_STD,
        }
        notes.append(f"{source.preprocessor_found}: ImageNet mean and std at the model's size")
    return hf_preprocessing(proc, image)
