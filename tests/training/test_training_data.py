"""Training data: CIFAR-10 batches (restricted unpickling), image folders (colour and grayscale),
batched augmentation."""

from __future__ import annotations

import io
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vitviz.training.augment import Normalizer, random_crop_flip
from vitviz.training.cifar import CifarError, read_cifar10, safe_unpickle
from vitviz.training.config import TrainConfig
from vitviz.training.datasets import DatasetError, channel_stats, gray_u8, load_dataset
from vitviz.training.folder import scan_image_folder
from vitviz.training.validate import validate_training_config

CIFAR_NAMES = [
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
]


class _Py2Pickler(pickle._Pickler):
    """Writes bytes as Python 2 ``str`` (SHORT_BINSTRING / BINSTRING), as cPickle did."""

    dispatch = pickle._Pickler.dispatch.copy()

    def save_py2_str(self, obj: bytes) -> None:
        if len(obj) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(obj)]) + obj)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(obj)) + obj)
        self.memoize(obj)

    dispatch[bytes] = save_py2_str


def _py2_style(obj: object) -> bytes:
    """Pickle as the CIFAR-10 files are (Python 2 cPickle, protocol 2): str keys and array data
    as BINSTRING, numpy under its old module name."""
    buffer = io.BytesIO()
    _Py2Pickler(buffer, protocol=2).dump(obj)
    return buffer.getvalue().replace(b"numpy._core.multiarray", b"numpy.core.multiarray")


def write_cifar(root: Path, per_batch: int = 20, seed: int = 0) -> dict[str, np.ndarray]:
    """A cifar-10-batches-py folder in the real format with ``per_batch`` images per batch."""
    root.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    written = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        data = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        labels = [int(v) for v in rng.integers(0, 10, per_batch)]
        batch = {
            b"batch_label": name.encode(),
            b"labels": labels,
            b"data": data,
            b"filenames": [f"img_{i}.png".encode() for i in range(per_batch)],
        }
        (root / name).write_bytes(_py2_style(batch))
        written[name] = data
        written[name + "_labels"] = np.array(labels)
    meta = {
        b"num_cases_per_batch": per_batch,
        b"label_names": [n.encode() for n in CIFAR_NAMES],
        b"num_vis": 3072,
    }
    (root / "batches.meta").write_bytes(_py2_style(meta))
    return written


def test_cifar_folder_is_read_in_its_real_format(tmp_path: Path) -> None:
    written = write_cifar(tmp_path / "cifar-10-batches-py")
    assert (
        b"numpy.core.multiarray" in (tmp_path / "cifar-10-batches-py" / "test_batch").read_bytes()
    )
    train_x, _, test_x, test_y, names = read_cifar10(tmp_path / "cifar-10-batches-py")
    assert names == CIFAR_NAMES
    assert train_x.shape == (100, 3, 32, 32) and train_x.dtype == np.uint8
    assert test_x.shape == (20, 3, 32, 32)
    # Row layout: 1024 red, then green, then blue values, each row-major 32 × 32.
    first = written["data_batch_1"][0]
    assert np.array_equal(train_x[0, 0], first[:1024].reshape(32, 32))
    assert np.array_equal(train_x[0, 2], first[2048:].reshape(32, 32))
    assert np.array_equal(test_y, written["test_batch_labels"])

    data = load_dataset(
        TrainConfig(dataset=f"cifar10:{tmp_path / 'cifar-10-batches-py'}", train_size=50)
    )
    assert data.class_names == CIFAR_NAMES
    assert data.train_images.shape == (50, 3, 32, 32)
    assert data.val_images.shape == (20, 3, 32, 32)
    assert data.resize == "crop"


def test_cifar_batch_rewritten_by_python3_is_read(tmp_path: Path) -> None:
    root = tmp_path / "cifar"
    written = write_cifar(root)
    batch = {b"data": written["test_batch"], b"labels": list(written["test_batch_labels"])}
    (root / "test_batch").write_bytes(pickle.dumps(batch, protocol=2))  # bytes via _codecs
    assert b"_codecs" in (root / "test_batch").read_bytes()
    test_x = read_cifar10(root)[2]
    assert np.array_equal(test_x.reshape(-1, 3072), written["test_batch"])


def test_cifar_pickle_that_would_run_code_is_refused(tmp_path: Path) -> None:
    class Evil:
        def __reduce__(self) -> tuple:
            return (exec, ("pwned = True",))  # (not print: an imported Ray replaces it)

    with pytest.raises(pickle.UnpicklingError, match=r"builtins\.exec is not allowed"):
        safe_unpickle(pickle.dumps({b"data": Evil()}))
    root = tmp_path / "cifar"
    write_cifar(root)
    (root / "data_batch_3").write_bytes(pickle.dumps({b"data": Evil(), b"labels": []}))
    with pytest.raises(CifarError, match="data_batch_3 is not a readable CIFAR-10 batch"):
        read_cifar10(root)
    with pytest.raises(DatasetError, match="data_batch_3"):
        load_dataset(TrainConfig(dataset=f"cifar10:{root}"))


def test_cifar_batch_with_wrong_contents_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "cifar"
    write_cifar(root)
    bad = {b"data": np.zeros((4, 100), dtype=np.uint8), b"labels": [0, 1, 2, 3]}
    (root / "test_batch").write_bytes(_py2_style(bad))
    with pytest.raises(CifarError, match=r"uint8 array \(N, 3072\)"):
        read_cifar10(root)


def _write_class_folder(root: Path, classes: dict[str, int], size: int = 24) -> None:
    rng = np.random.default_rng(0)
    for c, (name, count) in enumerate(classes.items()):
        (root / name).mkdir(parents=True)
        for i in range(count):
            pixels = np.full((size, size + 8, 3), 40 * c, dtype=np.uint8)  # not square
            pixels += rng.integers(0, 20, pixels.shape, dtype=np.uint8)
            Image.fromarray(pixels).save(root / name / f"{i}.png")


def test_folder_without_split_gets_a_seeded_per_class_split(tmp_path: Path) -> None:
    _write_class_folder(tmp_path / "pets", {"cat": 10, "dog": 10, "eel": 5})
    (tmp_path / "pets" / "dog" / "notes.txt").write_text("not an image")
    cfg = TrainConfig(dataset=f"folder:{tmp_path / 'pets'}", image_size=16, val_fraction=0.2)
    data = load_dataset(cfg)
    assert data.class_names == ["cat", "dog", "eel"]
    assert data.train_images.shape == (20, 3, 16, 16) and data.train_images.dtype == torch.uint8
    assert data.val_labels.bincount(minlength=3).tolist() == [2, 2, 1]
    assert data.description["split"] == "seeded"
    again = load_dataset(cfg)
    assert torch.equal(again.val_images, data.val_images)
    other = load_dataset(cfg.replace(seed=1))
    assert not torch.equal(other.val_images, data.val_images)
    # Colour per class survives loading: class c was painted 40·c (+ noise < 20).
    means = data.train_images.float().mean(dim=(1, 2, 3))
    assert torch.all((means - 40 * data.train_labels - 9.5).abs() < 3)


def test_folder_with_train_and_val_uses_them(tmp_path: Path) -> None:
    root = tmp_path / "data"
    _write_class_folder(root / "train", {"a": 4, "b": 3})
    _write_class_folder(root / "val", {"a": 2, "b": 1})
    (root / "train" / "b" / "broken.png").write_bytes(b"not a png")
    data = load_dataset(TrainConfig(dataset=f"folder:{root}", image_size=16))
    assert data.class_names == ["a", "b"]
    assert len(data.train_labels) == 7 and len(data.val_labels) == 3
    assert data.val_labels.tolist() == [0, 0, 1]
    assert data.description["split"] == "folders"
    assert any("broken.png" in note for note in data.notes)


def test_folder_scan_refuses_empty_and_one_class_folders(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert "at least two class sub-folders" in scan_image_folder(tmp_path / "empty")[1][0]
    _write_class_folder(tmp_path / "one", {"only": 3})
    (tmp_path / "one" / "hollow").mkdir()  # a class folder without images doesn't count
    assert "(found 1: only)" in scan_image_folder(tmp_path / "one")[1][0]
    assert "does not exist" in scan_image_folder(tmp_path / "nowhere")[1][0]


def test_random_dataset_and_channel_stats() -> None:
    data = load_dataset(TrainConfig(dataset="random", train_size=64, val_size=16, image_size=16))
    assert data.train_images.shape == (64, 3, 16, 16) and len(data.class_names) == 10
    mean, std = channel_stats(data.train_images)
    assert all(abs(m - 0.5) < 0.02 for m in mean) and all(abs(s - 0.289) < 0.02 for s in std)


def _reference_crop_flip(img: torch.Tensor, oy: int, ox: int, flip: bool, pad: int) -> torch.Tensor:
    padded = torch.nn.functional.pad(img, (pad, pad, pad, pad))
    H, W = img.shape[-2:]
    out = padded[:, oy : oy + H, ox : ox + W]
    return out.flip(-1) if flip else out


def test_random_crop_flip_matches_crop_then_flip_per_image() -> None:
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (64, 3, 8, 10), generator=g, dtype=torch.uint8)
    out = random_crop_flip(images, padding=2, flip=True, generator=torch.Generator().manual_seed(1))
    assert out.shape == images.shape and out.dtype == torch.uint8
    for i in range(len(images)):  # some (oy, ox, flip) must reproduce each output
        found = any(
            torch.equal(out[i], _reference_crop_flip(images[i], oy, ox, flip, 2))
            for oy in range(5)
            for ox in range(5)
            for flip in (False, True)
        )
        assert found, i
    unchanged = sum(torch.equal(out[i], images[i]) for i in range(len(images)))
    assert unchanged < 16  # it does augment
    assert torch.equal(random_crop_flip(images, 0, False), images)


def test_normalizer_is_to_tensor_then_normalize() -> None:
    x = torch.randint(0, 256, (2, 3, 4, 4), dtype=torch.uint8)
    mean, std = (0.4, 0.5, 0.6), (0.2, 0.25, 0.3)
    expected = (x.float() / 255 - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(
        1, 3, 1, 1
    )
    torch.testing.assert_close(Normalizer(mean, std)(x), expected, atol=1e-5, rtol=1e-5)


# -- grayscale data: one-channel models ------------------------------------------------------------
def _write_gray_folder(root: Path, count: int = 4, size: int = 20) -> dict[Path, np.ndarray]:
    """Two classes of mode-"L" PNGs (MNIST / Fashion-MNIST style); returns path -> pixels."""
    rng = np.random.default_rng(1)
    written = {}
    for c, name in enumerate(("zero", "one")):
        (root / name).mkdir(parents=True)
        for i in range(count):
            pixels = rng.integers(0, 120, (size, size + 6), dtype=np.uint8) + 120 * c
            Image.fromarray(pixels, mode="L").save(root / name / f"{i}.png")
            written[root / name / f"{i}.png"] = pixels
    return written


def _gray_reference(pixels: np.ndarray, size: int) -> np.ndarray:
    """Resize to cover and centre-crop a (h, w) or (h, w, 3) uint8 image as grayscale, with PIL
    (luma taken first, as inference does): (size, size) uint8."""
    image = Image.fromarray(pixels).convert("L")
    w, h = image.size
    cover = (size * w // h, size) if w >= h else (size, size * h // w)
    image = image.resize(cover, Image.Resampling.BICUBIC)
    left, top = round((cover[0] - size) / 2), round((cover[1] - size) / 2)
    return np.asarray(image.crop((left, top, left + size, top + size)))


def test_folder_of_grayscale_images_gives_one_channel(tmp_path: Path) -> None:
    written = _write_gray_folder(tmp_path / "digits")
    cfg = TrainConfig(dataset=f"folder:{tmp_path / 'digits'}", image_size=16, val_fraction=0.25)
    data = load_dataset(cfg)
    assert data.train_images.shape == (6, 1, 16, 16) and data.val_images.shape == (2, 1, 16, 16)
    assert data.description["channels"] == 1
    assert data.description["channels_from"] == "the images"
    # Each image is its file, resized and cropped like inference does: find it among the files.
    expected = {p: _gray_reference(px, 16) for p, px in written.items()}
    for image in torch.cat([data.train_images, data.val_images]):
        assert any(np.array_equal(image[0].numpy(), e) for e in expected.values())
    # Asked for RGB: the same gray on R, G and B.
    rgb = load_dataset(cfg.replace(in_channels=3))
    assert rgb.train_images.shape == (6, 3, 16, 16)
    assert torch.equal(rgb.train_images[:, :1].expand(-1, 3, -1, -1), rgb.train_images)
    assert torch.equal(rgb.train_images[:, :1], data.train_images)


def test_colour_folder_made_grayscale_when_asked(tmp_path: Path) -> None:
    _write_class_folder(tmp_path / "pets", {"cat": 3, "dog": 3})
    cfg = TrainConfig(dataset=f"folder:{tmp_path / 'pets'}", image_size=16, in_channels=1)
    data = load_dataset(cfg)
    assert data.train_images.shape[1] == 1 and data.description["channels_from"] == "settings"
    files = sorted((tmp_path / "pets").rglob("*.png"))
    expected = [_gray_reference(np.asarray(Image.open(f)), 16) for f in files]
    for image in data.train_images:
        assert any(np.array_equal(image[0].numpy(), e) for e in expected)
    assert load_dataset(cfg.replace(in_channels=None)).train_images.shape[1] == 3  # colour


def test_gray_u8_is_pil_luma() -> None:
    rgb = np.random.default_rng(2).integers(0, 256, (3, 17, 19, 3), dtype=np.uint8)
    gray = gray_u8(torch.from_numpy(rgb).permute(0, 3, 1, 2))
    assert gray.shape == (3, 1, 17, 19) and gray.dtype == torch.uint8
    for i in range(3):
        assert np.array_equal(gray[i, 0].numpy(), np.asarray(Image.fromarray(rgb[i]).convert("L")))


def test_generated_data_in_one_channel() -> None:
    cfg = TrainConfig(dataset="shapes", image_size=16, train_size=8, val_size=4, in_channels=1)
    data = load_dataset(cfg)
    colour = load_dataset(cfg.replace(in_channels=None))
    assert data.train_images.shape == (8, 1, 16, 16)
    assert torch.equal(data.train_images, gray_u8(colour.train_images))
    assert data.train_set(2)[0].shape == (8, 1, 16, 16)  # fresh shapes every epoch, gray too


@pytest.mark.parametrize("channels", [0, 2, 4, True, 1.0])
def test_other_channel_counts_are_refused_before_training(channels: object) -> None:
    problems = validate_training_config(TrainConfig(in_channels=channels))  # type: ignore[arg-type]
    assert any("in_channels must be 1 (grayscale) or 3 (RGB)" in p for p in problems)
    assert validate_training_config(TrainConfig(in_channels=1)) == []


def test_channels_option_of_the_train_command() -> None:
    import shlex

    from vitviz.cli import build_parser
    from vitviz.training.command import config_from_args
    from vitviz.training.config import equivalent_command

    args = build_parser().parse_args(
        ["train", "--dataset", "folder:/data/digits", "--channels", "1"]
    )
    cfg = config_from_args(args)
    assert cfg.in_channels == 1
    command = equivalent_command(cfg)
    assert "--channels 1" in command
    rebuilt = config_from_args(build_parser().parse_args(shlex.split(command)[1:]))
    assert rebuilt.in_channels == 1 and rebuilt.dataset == cfg.dataset
    assert "--channels" not in equivalent_command(cfg.replace(in_channels=None))
    assert cfg.model_kwargs(10, 3)["in_channels"] == 1  # the setting wins over the data
    assert cfg.replace(in_channels=None).model_kwargs(10, 1)["in_channels"] == 1
