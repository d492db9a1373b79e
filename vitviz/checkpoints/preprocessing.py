"""Each library's evaluation preprocessing, as a vitviz Preprocessing dict.

- torchvision ViT weights: Resize(256) + CenterCrop(224), bilinear, ImageNet mean/std (the SWAG
  weights at 384/512/518: resize straight to the crop size, bicubic).
- timm: ``pretrained_cfg`` (config.json): input_size, crop_pct, crop_mode, interpolation, mean, std.
- Hugging Face: the image processor's settings (preprocessor_config.json, or transformers 5's
  processor_config.json: folders.read_image_processor): size, crop_size, do_center_crop,
  crop_pct, resample, image_mean/std; ViT resizes straight to 224×224 ("squash").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from vitviz.checkpoints.families.common import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    INCEPTION_MEAN,
    INCEPTION_STD,
    SIZE_SAID_BY,
)

# PIL resampling codes used by Hugging Face image processors.
_HF_RESAMPLE = {
    0: "nearest",
    1: "lanczos",
    2: "bilinear",
    3: "bicubic",
    4: "bilinear",
    5: "bilinear",
}
_INTERPOLATIONS = ("nearest", "bilinear", "bicubic", "lanczos")


def crop_pct_for(crop: int, resize: int) -> float:
    """crop / resize, nudged so that floor(crop / crop_pct) gives back ``resize`` exactly."""
    pct = min(1.0, crop / resize)
    while math.floor(crop / pct) < resize and pct > 0:
        pct = math.nextafter(pct, 0.0)
    return pct


def torchvision_preprocessing(image_size: tuple[int, int]) -> dict[str, Any]:
    """The transforms of torchvision's ViT weights for a model trained at ``image_size``."""
    if tuple(image_size) == (224, 224):
        return {
            "resize": "crop",
            "crop_pct": crop_pct_for(224, 256),
            "interpolation": "bilinear",
            "mean": IMAGENET_MEAN,
            "std": IMAGENET_STD,
        }
    return {
        "resize": "crop",
        "crop_pct": 1.0,
        "interpolation": "bicubic",
        "mean": IMAGENET_MEAN,
        "std": IMAGENET_STD,
    }


def timm_preprocessing(
    pretrained_cfg: Mapping[str, Any] | None, defaults: Mapping[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """timm ``pretrained_cfg`` -> Preprocessing fields (``defaults`` fill what it lacks)."""
    cfg = dict(pretrained_cfg or {})
    notes: list[str] = []
    out = dict(defaults)
    size = cfg.get("input_size")
    if isinstance(size, (list, tuple)) and len(size) == 3:
        out["image_size"] = [int(size[1]), int(size[2])]
        out[SIZE_SAID_BY] = "timm's pretrained_cfg input_size"  # the model's size decides
    if isinstance(cfg.get("crop_pct"), (int, float)):
        out["crop_pct"] = min(1.0, float(cfg["crop_pct"]))
    mode = cfg.get("crop_mode", "center")
    if mode == "squash":
        out["resize"] = "squash"
    elif mode != "center":
        notes.append(f"timm crop_mode {mode!r} shown as a centre crop")
    interp = cfg.get("interpolation")
    if interp in _INTERPOLATIONS:
        out["interpolation"] = interp
    elif interp:
        notes.append(f"timm interpolation {interp!r} shown as bicubic")
        out["interpolation"] = "bicubic"
    for key in ("mean", "std"):
        value = cfg.get(key)  # one number per channel (in_chans), checked by Preprocessing
        if isinstance(value, (list, tuple)) and value:
            out[key] = [float(v) for v in value]
    return out, notes


TIMM_VIT_DEFAULTS = {
    "resize": "crop",
    "crop_pct": 0.9,
    "interpolation": "bicubic",
    "mean": INCEPTION_MEAN,
    "std": INCEPTION_STD,
}
TIMM_DEIT_DEFAULTS = {
    "resize": "crop",
    "crop_pct": 0.875,
    "interpolation": "bicubic",
    "mean": IMAGENET_MEAN,
    "std": IMAGENET_STD,
}
# DINO / DINOv2 linear evaluation: Resize(256, bicubic) + CenterCrop(224), ImageNet mean/std.
DINO_DEFAULTS = {
    "image_size": [224, 224],
    "resize": "crop",
    "crop_pct": 0.875,
    "interpolation": "bicubic",
    "mean": IMAGENET_MEAN,
    "std": IMAGENET_STD,
}

# Hugging Face image processors' defaults, by model_type, when the folder has no image processor.
HF_DEFAULTS: dict[str, dict[str, Any]] = {
    "vit": {
        "do_resize": True,
        "size": {"height": 224, "width": 224},
        "resample": 2,
        "image_mean": INCEPTION_MEAN,
        "image_std": INCEPTION_STD,
    },
    "deit": {
        "do_resize": True,
        "size": {"height": 256, "width": 256},
        "resample": 3,
        "do_center_crop": True,
        "crop_size": {"height": 224, "width": 224},
        "image_mean": IMAGENET_MEAN,
        "image_std": IMAGENET_STD,
    },
    "dinov2": {
        "do_resize": True,
        "size": {"shortest_edge": 256},
        "resample": 3,
        "do_center_crop": True,
        "crop_size": {"height": 224, "width": 224},
        "image_mean": IMAGENET_MEAN,
        "image_std": IMAGENET_STD,
    },
}


def _hw(value: Any) -> tuple[int, int] | None:
    if isinstance(value, int):
        return (value, value)
    if isinstance(value, Mapping) and "height" in value and "width" in value:
        return (int(value["height"]), int(value["width"]))
    return None


def hf_preprocessing(
    proc: Mapping[str, Any], model_size: tuple[int, int]
) -> tuple[dict[str, Any], list[str]]:
    """An image processor's settings -> Preprocessing fields, and notes on what differs."""
    notes: list[str] = []
    out: dict[str, Any] = {"interpolation": _HF_RESAMPLE.get(proc.get("resample", 2), "bilinear")}
    if proc.get("resample") in (4, 5):
        notes.append("the image processor's box/hamming resampling is shown as bilinear")
    if proc.get("do_normalize", True):
        out["mean"] = [float(v) for v in proc.get("image_mean", INCEPTION_MEAN)]
        out["std"] = [float(v) for v in proc.get("image_std", INCEPTION_STD)]
    else:
        out["mean"], out["std"] = [0.0], [1.0]  # one number: every channel
    size = proc.get("size")
    crop = _hw(proc.get("crop_size")) if proc.get("do_center_crop") else None
    shortest = size.get("shortest_edge") if isinstance(size, Mapping) else None
    square = _hw(size)
    if not proc.get("do_resize", True):
        out.update(image_size=list(crop or model_size), resize="crop", crop_pct=1.0)
        notes.append("the image processor does not resize; shown as a centre crop")
    elif crop is not None and (shortest or square):
        resize_to = int(shortest) if shortest else min(square)  # type: ignore[arg-type]
        pct = proc.get("crop_pct")
        crop_pct = (
            float(pct) if isinstance(pct, (int, float)) else crop_pct_for(min(crop), resize_to)
        )
        out.update(image_size=list(crop), resize="crop", crop_pct=crop_pct)
        if square and square[0] == square[1] and not shortest:
            notes.append(
                f"the image processor squashes to {square[0]}×{square[1]} before the "
                f"centre crop; vitviz keeps the aspect ratio (same for square images)"
            )
    elif square is not None:
        out.update(image_size=list(square), resize="squash")
    elif shortest:
        out.update(
            image_size=list(model_size),
            resize="crop",
            crop_pct=crop_pct_for(min(model_size), int(shortest)),
        )
    else:
        out.update(image_size=list(model_size), resize="squash")
    return out, notes
