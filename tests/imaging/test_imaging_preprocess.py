"""Preprocessing: torchvision equivalence for "crop", "squash", "fit", settings round trips."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
import torch
import torchvision.transforms as T
from PIL import Image
from skimage import data

from vitviz.imaging import Preprocessing, denormalize, prepare_image
from vitviz.imaging import preprocess as preprocess_module
from vitviz.imaging.preprocess import check_channels, source_for_display

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _photos() -> dict[str, np.ndarray]:
    return {
        "chelsea": data.chelsea(),  # landscape 300 × 451
        "chelsea447": data.chelsea()[:, :447],  # crop offset 78.5: Python's round gives 78
        "astronaut": data.astronaut(),  # square
        "rocket": data.rocket(),  # landscape 427 × 640
        "coffee_portrait": np.ascontiguousarray(data.coffee().transpose(1, 0, 2)),  # portrait
    }


@pytest.mark.parametrize("name", list(_photos()))
def test_crop_matches_torchvision_exactly(name: str) -> None:
    image = Image.fromarray(_photos()[name])
    prep = Preprocessing((224, 224), "crop", 0.875, IMAGENET_MEAN, IMAGENET_STD, "bicubic")
    bicubic = T.InterpolationMode.BICUBIC
    reference = T.Compose([T.Resize(256, interpolation=bicubic), T.CenterCrop(224)])(image)
    to_tensor = T.Compose([T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    prepared = prepare_image(image, prep, patch_size=16)
    np.testing.assert_array_equal(prepared.pixels, np.asarray(reference))
    assert prepared.tensor.dtype == torch.float32
    assert prepared.tensor.shape == (3, 224, 224)
    assert torch.equal(prepared.tensor, to_tensor(reference))
    assert prepared.geometry.grid == (14, 14)
    assert prepared.geometry.source_size == (image.height, image.width)


def test_crop_region_is_what_the_input_shows() -> None:
    image = Image.fromarray(data.rocket())
    prep = Preprocessing((224, 320), "crop", 0.9)
    prepared = prepare_image(image, prep, patch_size=16)
    geo = prepared.geometry
    assert prepared.pixels.shape == (224, 320, 3)
    assert geo.grid == (14, 20)
    left, top, right, bottom = geo.region
    assert 0 <= left < right <= image.width and 0 <= top < bottom <= image.height
    # Same aspect ratio as the input (no distortion beyond rounding) and centred.
    assert (right - left) / (bottom - top) == pytest.approx(320 / 224, rel=0.01)
    assert (left + right) / 2 == pytest.approx(image.width / 2, abs=1)
    assert (top + bottom) / 2 == pytest.approx(image.height / 2, abs=1)
    # Resampling that source box directly gives (almost) the same pixels.
    direct = image.resize((320, 224), Image.Resampling.BICUBIC, box=geo.region)
    assert np.abs(np.asarray(direct).astype(int) - prepared.pixels).max() <= 2


def test_crop_of_very_thin_image_resizes_only_the_box(monkeypatch: pytest.MonkeyPatch) -> None:
    image = Image.fromarray(data.chelsea())
    prep = Preprocessing((224, 224), "crop", 0.875)
    exact = prepare_image(image, prep, 16)
    monkeypatch.setattr(preprocess_module, "_MAX_INTERMEDIATE_PIXELS", 1)
    boxed = prepare_image(image, prep, 16)
    diff = np.abs(boxed.pixels.astype(int) - exact.pixels)
    assert diff.mean() < 0.1
    assert diff.max() <= 8
    assert boxed.geometry == exact.geometry


def test_squash_ignores_aspect() -> None:
    image = Image.fromarray(data.coffee())
    prep = Preprocessing((224, 224), "squash", interpolation="bilinear")
    prepared = prepare_image(image, prep, 16)
    expected = np.asarray(image.resize((224, 224), Image.Resampling.BILINEAR))
    np.testing.assert_array_equal(prepared.pixels, expected)
    assert prepared.geometry.region == (0.0, 0.0, 600.0, 400.0)
    sx, sy = prepared.geometry.scale
    assert sx == pytest.approx(600 / 224) and sy == pytest.approx(400 / 224)


@pytest.mark.parametrize("name", ["chelsea", "rocket", "coffee_portrait", "astronaut"])
@pytest.mark.parametrize("patch", [14, 16, 32])
def test_fit_keeps_aspect_and_whole_image(name: str, patch: int) -> None:
    array = _photos()[name]
    h0, w0 = array.shape[:2]
    prep = Preprocessing((224, 224), "fit")
    prepared = prepare_image(Image.fromarray(array), prep, patch)
    h, w = prepared.pixels.shape[:2]
    assert h % patch == 0 and w % patch == 0
    scale = math.sqrt(224 * 224 / (h0 * w0))
    assert abs(h - h0 * scale) <= patch / 2
    assert abs(w - w0 * scale) <= patch / 2
    assert prepared.geometry.region == (0.0, 0.0, float(w0), float(h0))
    assert prepared.geometry.grid == (h // patch, w // patch)
    assert prepared.tensor.shape == (3, h, w)


def test_not_divisible_is_refused() -> None:
    image = Image.fromarray(data.astronaut())
    for mode in ("crop", "squash"):
        with pytest.raises(ValueError, match="not divisible by the patch size 16"):
            prepare_image(image, Preprocessing((225, 224), mode), 16)
    assert prepare_image(image, Preprocessing((225, 224), "fit"), 16).pixels.shape[0] % 16 == 0


def test_non_rgb_input_is_converted() -> None:
    gray = Image.fromarray(data.camera())
    prepared = prepare_image(gray, Preprocessing(64, "squash"), 16)
    assert prepared.pixels.shape == (64, 64, 3)
    np.testing.assert_array_equal(prepared.pixels[..., 0], prepared.pixels[..., 2])


def test_denormalize_inverts_the_tensor() -> None:
    prep = Preprocessing((224, 224), "crop", 0.875, IMAGENET_MEAN, IMAGENET_STD)
    prepared = prepare_image(Image.fromarray(data.chelsea()), prep, 16)
    np.testing.assert_array_equal(denormalize(prepared.tensor, prep), prepared.pixels)
    np.testing.assert_array_equal(denormalize(prepared.tensor[None], prep), prepared.pixels)
    batch = denormalize(torch.stack([prepared.tensor, prepared.tensor.flip(-1)]), prep)
    assert batch.shape == (2, 224, 224, 3)
    np.testing.assert_array_equal(batch[1], prepared.pixels[:, ::-1])
    with pytest.raises(ValueError):
        denormalize(torch.zeros(4, 8, 8), prep)


def test_preprocessing_round_trip() -> None:
    prep = Preprocessing((224, 320), "fit", 0.9, IMAGENET_MEAN, IMAGENET_STD, "lanczos")
    text = json.dumps(prep.to_dict())
    back = Preprocessing.from_dict(json.loads(text))
    assert back == prep
    assert Preprocessing.from_dict({"image_size": 384}).image_size == (384, 384)
    assert Preprocessing.from_dict({"image_size": [224, 160]}).image_size == (224, 160)
    assert Preprocessing.from_dict({"image_size": 224, "mean": [0, 0, 0]}).mean == (0.0, 0.0, 0.0)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"resize": "zoom"}, "resize must be one of"),
        ({"crop_pct": 0}, "crop_pct"),
        ({"crop_pct": 1.5}, "crop_pct"),
        ({"crop_pct": "0.9"}, "crop_pct"),
        ({"std": [0.5, 0.0, 0.5]}, "std must be greater than 0"),
        ({"mean": [0.5, 0.5]}, r"mean must be three numbers \(R, G, B\) or one for all three"),
        ({"mean": [0.5, 0.5], "channels": 1}, r"mean must be one number \(the model takes 1-ch"),
        ({"std": [0.5] * 3, "channels": 4}, r"std must be 4 numbers \(one per channel\) or one"),
        ({"channels": 0}, "channels must be a whole number from 1 to 64"),
        ({"channels": 2.0}, "channels must be a whole number"),
        ({"channels": True}, "channels must be a whole number"),
        ({"mean": [0.5, float("nan"), 0.5]}, "finite"),
        ({"interpolation": "cubic"}, "interpolation must be one of"),
        ({"image_size": -1}, "positive"),
        ({"image_size": [224]}, "image_size"),
        ({"image_size": True}, "image_size"),
        ({"image_size": [224.5, 224]}, "whole numbers"),
        ({"colour": "red"}, "unknown preprocessing keys"),
    ],
)
def test_preprocessing_rejects_bad_values(changes: dict, message: str) -> None:
    settings = {"image_size": 224, **changes}
    with pytest.raises(ValueError, match=message):
        Preprocessing.from_dict(settings)


def test_preprocessing_needs_image_size() -> None:
    with pytest.raises(ValueError, match="needs image_size"):
        Preprocessing.from_dict({"resize": "crop"})
    with pytest.raises(ValueError, match="must be a dict"):
        Preprocessing.from_dict([224])  # type: ignore[arg-type]


def test_importing_imaging_does_not_import_torch() -> None:
    code = "import sys, vitviz.imaging; print('torch' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "False"


# -- one-channel (grayscale) and other channel counts ----------------------------------------------
MNIST = ((0.1307,), (0.3081,))


@pytest.mark.parametrize("name", ["chelsea", "chelsea447", "coffee_portrait", "camera"])
def test_one_channel_matches_torchvision_grayscale_exactly(name: str) -> None:
    """Grayscale (PIL's luma, as torchvision's Grayscale and MNIST PNGs), then the same resize,
    crop and normalisation as for RGB: the tensor is torchvision's bit for bit."""
    array = data.camera() if name == "camera" else _photos()[name]
    image = Image.fromarray(array)
    prep = Preprocessing((28, 28), "crop", 0.875, *MNIST, "bilinear", channels=1)
    bilinear = T.InterpolationMode.BILINEAR
    gray = T.Compose([T.Grayscale(1), T.Resize(32, interpolation=bilinear), T.CenterCrop(28)])(
        image
    )
    reference = T.Compose([T.ToTensor(), T.Normalize(*MNIST)])(gray)
    prepared = prepare_image(image, prep, patch_size=4)
    assert prepared.tensor.shape == (1, 28, 28)
    assert torch.equal(prepared.tensor, reference)
    assert prepared.pixels.shape == (28, 28, 3)  # for display: the gray on R, G and B
    for c in range(3):
        np.testing.assert_array_equal(prepared.pixels[..., c], np.asarray(gray))
    # the luma is the ITU-R 601-2 one: (19595 R + 38470 G + 7471 B + 2^15) >> 16
    rgb = np.asarray(image.convert("RGB")).astype(np.int64)
    luma = (rgb[..., 0] * 19595 + rgb[..., 1] * 38470 + rgb[..., 2] * 7471 + 0x8000) >> 16
    np.testing.assert_array_equal(np.asarray(source_for_display(image, 1))[..., 1], luma)
    np.testing.assert_array_equal(denormalize(prepared.tensor, prep), prepared.pixels)


def test_one_number_is_used_for_every_channel() -> None:
    assert Preprocessing(8, mean=0.25, std=[0.5]).mean == (0.25, 0.25, 0.25)
    assert Preprocessing(8, mean=0.25, std=[0.5]).std == (0.5, 0.5, 0.5)
    gray = Preprocessing.from_dict(
        {"image_size": 28, "mean": [0.1307], "std": 0.3081, "channels": 1}
    )
    assert (gray.mean, gray.std, gray.channels) == ((0.1307,), (0.3081,), 1)
    assert Preprocessing(8, mean=0.5, std=0.5, channels=4).mean == (0.5,) * 4
    back = Preprocessing.from_dict(json.loads(json.dumps(gray.to_dict())))
    assert back == gray and gray.to_dict()["channels"] == 1
    assert Preprocessing.from_dict({"image_size": 8}).channels == 3  # older files: RGB


def test_channel_counts_images_cannot_have_are_refused() -> None:
    prep = Preprocessing(16, "squash", mean=0.5, std=0.5, channels=4)
    with pytest.raises(ValueError, match="the model takes 4-channel inputs; vitviz makes images"):
        prepare_image(Image.fromarray(data.astronaut()), prep, 8)
    # a tensor of any channel count is shown as the mean of its channels
    shown = denormalize(torch.zeros(4, 8, 8), prep)
    assert shown.shape == (8, 8, 3) and (shown == 128).all()
    with pytest.raises(ValueError, match=r"expected a \(4, H, W\)"):
        denormalize(torch.zeros(3, 8, 8), prep)


def test_check_channels_names_both_counts() -> None:
    assert check_channels(Preprocessing(8, mean=0.5, std=0.5, channels=1), 1) == 1
    with pytest.raises(ValueError) as info:
        check_channels(Preprocessing(8), 1)
    assert str(info.value).startswith(
        "the preprocessing makes 3-channel inputs but the model takes 1-channel images"
    )
