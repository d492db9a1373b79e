"""``explain --method pca --joint-pca``: the pca map of every image from one fit over the run's
images (DINOv2's figure), in the npz and the PNGs; refused without the pca map."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vitviz.checkpoints import load_checkpoint
from vitviz.cli import main
from vitviz.explain.feature_methods import joint_pca
from vitviz.explain.methods import get_method
from vitviz.pipeline.analysis import analyze


@pytest.fixture
def images(tmp_path: Path) -> list[Path]:
    rng = np.random.default_rng(4)
    out = []
    for name, shift in (("one.png", 0), ("two.png", 90)):
        pixels = rng.integers(0, 160, (40, 48, 3), dtype=np.uint8) + shift
        Image.fromarray(pixels.astype(np.uint8)).save(tmp_path / name)
        out.append(tmp_path / name)
    return out


def test_joint_pca_colours_equal_the_api_and_differ_from_each_fit(
    tmp_path: Path, tiny_ckpt: Path, images: list[Path]
) -> None:
    out = tmp_path / "out"
    argv = ["explain", *map(str, images), "--checkpoint", str(tiny_ckpt), "--out", str(out)]
    assert main([*argv, "--method", "pca", "--joint-pca", "--batch-size", "2"]) == 0
    loaded = load_checkpoint(tiny_ckpt)
    analyses = [analyze(loaded, p) for p in images]
    want = joint_pca(analyses)
    for p, joint, analysis in zip(images, want, analyses, strict=True):
        got = np.load(out / f"{p.stem}.npz")["map_pca"]
        np.testing.assert_allclose(got, joint, atol=1e-5)
        own = get_method("pca")(analysis).numpy()
        assert np.abs(got - own).max() > 0.05  # the image's own fit colours it otherwise
        with Image.open(out / f"{p.stem}_pca.png") as png:
            assert png.mode == "RGB"
    separate = tmp_path / "separate"
    argv[-1] = str(separate)
    assert main([*argv, "--method", "pca"]) == 0
    own = get_method("pca")(analyses[0]).numpy()
    np.testing.assert_allclose(np.load(separate / "one.npz")["map_pca"], own, atol=1e-5)
    with Image.open(out / "one_pca.png") as a, Image.open(separate / "one_pca.png") as b:
        assert np.asarray(a).shape == np.asarray(b).shape
        assert not np.array_equal(np.asarray(a), np.asarray(b))  # the PNG shows the joint fit


def test_joint_pca_needs_the_pca_map(
    tmp_path: Path, tiny_ckpt: Path, images: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["explain", str(images[0]), "--checkpoint", str(tiny_ckpt), "--joint-pca"]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    assert "--joint-pca colours the pca map: add --method pca" in capsys.readouterr().err
