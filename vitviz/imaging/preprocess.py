"""Turn a loaded RGB image into the model input tensor, recording the patch geometry.

Channels: a 3-channel model gets RGB; a 1-channel model gets grayscale made with PIL's
``convert("L")`` (ITU-R 601-2 luma, L = (19595·R + 38470·G + 7471·B + 2¹⁵) >> 16, what
torchvision's ``Grayscale`` and MNIST-style PNGs give), done before resizing. Mean and std hold one
number per channel (one number is used for every channel).

Three resize modes:

- ``"crop"``: torchvision/timm evaluation style. Resize so the image covers
  ``floor(H / crop_pct) × floor(W / crop_pct)`` keeping its aspect ratio (for a square target:
  the shorter side becomes ``floor(size / crop_pct)``, the longer ``int(short * long / short0)``
  exactly like ``torchvision.transforms.Resize(int)``), then centre-crop to (H, W) with the
  offsets ``round((h - H) / 2)`` of ``CenterCrop``.
- ``"squash"``: resize straight to (H, W), ignoring the aspect ratio (Hugging Face style).
- ``"fit"``: keep the whole image and its aspect ratio; the input size is chosen with sides that
  are multiples of the patch size and an area close to H × W.

torch is imported only when a tensor is made, so importing this module stays cheap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image

from vitviz.imaging.geometry import PatchGeometry
from vitviz.imaging.loading import to_rgb

if TYPE_CHECKING:
    import torch

__all__ = [
    "INTERPOLATIONS",
    "RESIZE_MODES",
    "PreparedImage",
    "Preprocessing",
    "check_channels",
    "denormalize",
    "fit_size",
    "input_size_for",
    "prepare_image",
    "source_for_display",
]

RESIZE_MODES = ("crop", "fit", "squash")

INTERPOLATIONS: dict[str, Image.Resampling] = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "lanczos": Image.Resampling.LANCZOS,
}

# Above this many pixels the "crop" resize is done on the crop box only (saves memory for
# very thin images); the result may then differ from resize-then-crop by a grey level.
_MAX_INTERMEDIATE_PIXELS = 25_000_000

_FIELDS = ("image_size", "resize", "crop_pct", "mean", "std", "interpolation", "channels")
IMAGE_CHANNELS = (1, 3)  # what an image can become: grayscale or RGB


def _as_size(value: Any) -> tuple[int, int]:
    """int or [h, w] -> (h, w) of positive ints."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        value = (value, value)
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise ValueError(f"image_size must be an int or [height, width], got {value!r}")
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value):
        raise ValueError(f"image_size must hold whole numbers, got {value!r}")
    h, w = int(value[0]), int(value[1])
    if h < 1 or w < 1:
        raise ValueError(f"image_size must be positive, got {value!r}")
    return h, w


def _count_message(name: str, value: Any, channels: int) -> str:
    if channels == 3:
        return f"{name} must be three numbers (R, G, B) or one for all three, got {value!r}"
    if channels == 1:
        return (
            f"{name} must be one number (the model takes 1-channel, grayscale images), "
            f"got {value!r}"
        )
    return f"{name} must be {channels} numbers (one per channel) or one, got {value!r}"


def _per_channel(name: str, value: Any, channels: int, positive: bool) -> tuple[float, ...]:
    """A number, or one or ``channels`` numbers -> ``channels`` finite floats (positive for std)."""
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, (tuple, list)) or len(value) not in (1, channels):
        raise ValueError(_count_message(name, value, channels))
    if not all(
        isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
        for v in value
    ):
        raise ValueError(_count_message(name, value, channels))
    out = tuple(float(v) for v in value) * (channels if len(value) == 1 else 1)
    if not all(math.isfinite(v) for v in out):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if positive and not all(v > 0 for v in out):
        raise ValueError(f"{name} must be greater than 0, got {value!r}")
    return out


@dataclass(frozen=True)
class Preprocessing:
    """How an image becomes the model input. Validated on construction (ValueError).

    ``channels``: the model's input channels (1: grayscale, 3: RGB; other counts only for
    tensors given directly). ``mean`` / ``std``: one number per channel, or one for all.
    """

    image_size: tuple[int, int]
    resize: str = "crop"
    crop_pct: float = 1.0
    mean: tuple[float, ...] = (0.5,)  # one number: the same for every channel
    std: tuple[float, ...] = (0.5,)
    interpolation: str = "bicubic"
    channels: int = 3

    def __post_init__(self) -> None:
        object.__setattr__(self, "image_size", _as_size(self.image_size))
        c = self.channels
        if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or not 1 <= c <= 64:
            raise ValueError(f"channels must be a whole number from 1 to 64, got {c!r}")
        object.__setattr__(self, "channels", int(c))
        if self.resize not in RESIZE_MODES:
            raise ValueError(
                f"resize must be one of {', '.join(RESIZE_MODES)}; got {self.resize!r}"
            )
        crop = self.crop_pct
        if isinstance(crop, bool) or not isinstance(crop, (int, float)):
            raise ValueError(f"crop_pct must be a number in (0, 1], got {crop!r}")
        if not (0 < crop <= 1):
            raise ValueError(f"crop_pct must be in (0, 1], got {crop!r}")
        object.__setattr__(self, "crop_pct", float(crop))
        mean = _per_channel("mean", self.mean, self.channels, positive=False)
        object.__setattr__(self, "mean", mean)
        object.__setattr__(self, "std", _per_channel("std", self.std, self.channels, positive=True))
        if self.interpolation not in INTERPOLATIONS:
            raise ValueError(
                f"interpolation must be one of {', '.join(INTERPOLATIONS)}; "
                f"got {self.interpolation!r}"
            )

    def cover_size(self) -> tuple[int, int]:
        """(h, w) the image is resized to cover before the centre crop of ``"crop"`` mode."""
        th, tw = self.image_size
        return math.floor(th / self.crop_pct), math.floor(tw / self.crop_pct)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict; ``Preprocessing.from_dict`` reads it back."""
        return {
            "image_size": list(self.image_size),
            "resize": self.resize,
            "crop_pct": self.crop_pct,
            "mean": list(self.mean),
            "std": list(self.std),
            "interpolation": self.interpolation,
            "channels": self.channels,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Preprocessing:
        """Build from a dict like ``to_dict``'s; missing keys other than image_size get defaults.

        Raises ValueError for a missing image_size, unknown keys or bad values.
        """
        if not isinstance(d, dict):
            raise ValueError(f"preprocessing must be a dict, got {type(d).__name__}")
        unknown = sorted(set(d) - set(_FIELDS))
        if unknown:
            raise ValueError(
                f"unknown preprocessing keys {unknown}; accepted: {', '.join(_FIELDS)}"
            )
        if "image_size" not in d:
            raise ValueError("preprocessing needs image_size (an int or [height, width])")
        return cls(**d)


@dataclass
class PreparedImage:
    """One image ready for the model.

    tensor: (C, H, W) float32, normalised with mean/std. pixels: (H, W, 3) uint8, the same input
    before normalisation as RGB for display (a grayscale input repeated on R, G and B).
    geometry: where its patches lie in the source image.
    """

    tensor: torch.Tensor
    pixels: np.ndarray
    geometry: PatchGeometry


def _check_divisible(size: tuple[int, int], patch_size: int, resize: str) -> None:
    h, w = size
    if h % patch_size or w % patch_size:
        raise ValueError(
            f"the model input {h}×{w} is not divisible by the patch size {patch_size} "
            f"(resize mode {resize!r}); choose an image size that is a multiple of {patch_size}"
        )


def fit_size(source_size: tuple[int, int], target: tuple[int, int], patch: int) -> tuple[int, int]:
    """(H, W) for ``"fit"``: the source aspect ratio, area near target H × W, sides multiples of
    ``patch``."""
    h0, w0 = source_size
    scale = math.sqrt(target[0] * target[1] / (h0 * w0))
    out_h = max(patch, round(h0 * scale / patch) * patch)
    out_w = max(patch, round(w0 * scale / patch) * patch)
    return out_h, out_w


def _cover_size(source_size: tuple[int, int], cover: tuple[int, int]) -> tuple[int, int]:
    """Size (h, w) that keeps the source aspect ratio and covers ``cover`` with one side equal
    to it; the other side is floored like torchvision's ``Resize(int)``."""
    h0, w0 = source_size
    ch, cw = cover
    if ch * w0 >= cw * h0:  # height binds (ch / h0 >= cw / w0)
        return ch, max(cw, int(ch * w0 / h0))
    return max(ch, int(cw * h0 / w0)), cw


def input_size_for(
    prep: Preprocessing, source_size: tuple[int, int], patch_size: int
) -> tuple[int, int]:
    """(H, W) of the model input for an image of ``source_size`` (H, W)."""
    if prep.resize == "fit":
        return fit_size(source_size, prep.image_size, patch_size)
    return prep.image_size


def _resize_crop(
    image: Image.Image,
    prep: Preprocessing,
    resample: Image.Resampling,
    full_size: tuple[int, int] | None = None,
) -> tuple[Image.Image, tuple[float, float, float, float]]:
    """Resize to cover, centre-crop; returns the input and the source region it shows. The
    crop is planned on ``full_size`` (H, W), the picture ``image`` was reduced from."""
    th, tw = prep.image_size
    w0, h0 = image.size
    rh, rw = _cover_size(full_size or (h0, w0), prep.cover_size())
    top = round((rh - th) / 2.0)
    left = round((rw - tw) / 2.0)
    sx, sy = rw / w0, rh / h0
    region = (left / sx, top / sy, (left + tw) / sx, (top + th) / sy)
    if full_size is not None or rh * rw > _MAX_INTERMEDIATE_PIXELS:
        return image.resize((tw, th), resample, box=region), region
    resized = image.resize((rw, rh), resample)
    return resized.crop((left, top, left + tw, top + th)), region


def _in_model_mode(image: Image.Image, channels: int) -> Image.Image:
    """``image`` as mode "L" (1 channel) or "RGB" (3); ValueError for other channel counts."""
    if channels not in IMAGE_CHANNELS:
        raise ValueError(
            f"the model takes {channels}-channel inputs; vitviz makes images into 1-channel "
            f"(grayscale) or 3-channel (RGB) inputs only; give analyze a normalised "
            f"({channels}, H, W) tensor instead"
        )
    if channels == 1:
        if image.mode == "L":
            return image
        return (image if image.mode == "RGB" else to_rgb(image)).convert("L")
    return image if image.mode == "RGB" else to_rgb(image)


def check_channels(prep: Preprocessing, in_channels: int) -> int:
    """``in_channels`` when ``prep`` makes inputs with that many channels; else ValueError (said
    before any forward pass, rather than a shape error inside the model)."""
    if prep.channels != in_channels:
        raise ValueError(
            f"the preprocessing makes {prep.channels}-channel inputs but the model takes "
            f"{in_channels}-channel images; give preprocessing with channels {in_channels} "
            f"(and {in_channels} numbers, or one, for mean and std)"
        )
    return int(in_channels)


def source_for_display(image: Image.Image, channels: int) -> Image.Image:
    """The source image in the colours the model sees, as RGB: grayscale repeated on R, G and B
    for a 1-channel model, else the image itself (RGB)."""
    if channels == 1:
        return _in_model_mode(image, 1).convert("RGB")
    return image if image.mode == "RGB" else to_rgb(image)


def prepare_image(
    image: Image.Image,
    prep: Preprocessing,
    patch_size: int,
    full_size: tuple[int, int] | None = None,
) -> PreparedImage:
    """Resize/crop ``image`` as ``prep`` says and normalise it.

    ``full_size``: (H, W) of the whole picture when ``image`` is a reduced copy of it
    (``vitviz.imaging.loading.full_size``): the crop and the "fit" size are planned on it, so
    the input shows what the full picture's would (the geometry stays in ``image``'s pixels).

    Returns the (C, H, W) float32 tensor (C = ``prep.channels``: grayscale for 1, RGB for 3),
    the (H, W, 3) uint8 pixels and the patch geometry. Raises ValueError when the input size is
    not divisible by ``patch_size`` ("crop", "squash") or C is neither 1 nor 3.
    """
    import torch

    if patch_size < 1:
        raise ValueError(f"patch_size must be positive, got {patch_size}")
    image = _in_model_mode(image, prep.channels)
    w0, h0 = image.size
    resample = INTERPOLATIONS[prep.interpolation]
    if prep.resize == "crop":
        _check_divisible(prep.image_size, patch_size, prep.resize)
        full = None if full_size in (None, (h0, w0)) else full_size
        out, region = _resize_crop(image, prep, resample, full)
    else:
        if prep.resize == "squash":
            _check_divisible(prep.image_size, patch_size, prep.resize)
        th, tw = input_size_for(prep, full_size or (h0, w0), patch_size)
        out = image.resize((tw, th), resample)
        region = (0.0, 0.0, float(w0), float(h0))
    values = np.array(out, dtype=np.uint8).reshape(out.height, out.width, -1)  # (H, W, C)
    geometry = PatchGeometry(
        input_size=(values.shape[0], values.shape[1]),
        patch_size=patch_size,
        source_size=(h0, w0),
        region=region,
    )
    # Same operations as torchvision ToTensor + Normalize, so the values match bit for bit.
    tensor = torch.from_numpy(values).permute(2, 0, 1).contiguous().to(torch.float32).div(255)
    C = prep.channels
    mean = torch.tensor(prep.mean, dtype=torch.float32).view(C, 1, 1)
    std = torch.tensor(prep.std, dtype=torch.float32).view(C, 1, 1)
    tensor = tensor.sub_(mean).div_(std)
    pixels = values if C == 3 else np.repeat(values, 3, axis=2)
    return PreparedImage(tensor=tensor, pixels=pixels, geometry=geometry)


def denormalize(tensor: torch.Tensor, prep: Preprocessing) -> np.ndarray:
    """Undo mean/std for display: (C, H, W) or (1, C, H, W) -> (H, W, 3) uint8; (B, C, H, W) ->
    (B, H, W, 3) uint8 for B > 1. C = ``prep.channels``; for C other than 3 the mean over the
    channels is shown as gray (a grayscale input as itself)."""
    import torch

    C = prep.channels
    t = tensor.detach().to(device="cpu", dtype=torch.float32)
    if t.ndim == 4 and t.shape[0] == 1:
        t = t[0]
    if t.ndim not in (3, 4) or t.shape[-3] != C:
        raise ValueError(
            f"expected a ({C}, H, W) or (B, {C}, H, W) tensor for {C}-channel preprocessing, "
            f"got {tuple(tensor.shape)}"
        )
    mean = torch.tensor(prep.mean, dtype=torch.float32).view(C, 1, 1)
    std = torch.tensor(prep.std, dtype=torch.float32).view(C, 1, 1)
    values = (t * std + mean).mul(255)
    if C != 3:
        values = values.mean(dim=-3, keepdim=True).expand(*values.shape[:-3], 3, *t.shape[-2:])
    values = values.round().clamp(0, 255).to(torch.uint8)
    return values.movedim(-3, -1).contiguous().numpy()
