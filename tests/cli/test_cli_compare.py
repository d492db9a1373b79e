"""``vitviz-cli compare``: per image ``<stem>_compare.npz`` (head similarity, both models'
logits, each rollout) and a side-by-side PNG; a folder gives the mean; wrong use is one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import CLASS_NAMES, random_vit
from PIL import Image

from vitviz.checkpoints import load_checkpoint, save_checkpoint
from vitviz.cli import main
from vitviz.pipeline.analysis import analyze
from vitviz.pipeline.compare import compare_analyses


@pytest.fixture
def images(tmp_path: Path) -> Path:
    folder = tmp_path / "images"
    folder.mkdir()
    rng = np.random.default_rng(2)
    for name in ("one.png", "two.png"):
        Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(folder / name)
    return folder


def test_compare_writes_the_npz_and_the_side_by_side_png(
    tmp_path: Path, tiny_ckpt: Path, images: Path
) -> None:
    other = save_checkpoint(random_vit(seed=7), tmp_path / "epoch1.safetensors",
                            class_names=CLASS_NAMES)  # fmt: skip
    out = tmp_path / "out"
    image = images / "one.png"
    argv = ["compare", str(image), str(images), "--checkpoint", str(tiny_ckpt)]
    assert main([*argv, "--checkpoint", str(other), "--out", str(out)]) == 0
    got = np.load(out / "one_compare.npz")
    a, b = load_checkpoint(tiny_ckpt), load_checkpoint(other)
    aa, bb = analyze(a, image), analyze(b, image)
    want = compare_analyses(a, aa, b, bb)
    np.testing.assert_allclose(got["head_similarity"], want.head_similarity, rtol=1e-6)
    np.testing.assert_allclose(got["logits_a"], aa.logits.numpy(), rtol=1e-6)
    np.testing.assert_allclose(got["logits_b"], bb.logits.numpy(), rtol=1e-6)
    np.testing.assert_allclose(got["rollout_b"], want.rollout_b, rtol=1e-6)
    assert list(got["class_names_a"]) == CLASS_NAMES
    with Image.open(out / "one_compare.png") as png:
        assert png.width > png.height  # two pictures side by side
    mean = np.load(out / "images_compare.npz")
    sims = []
    for p in sorted(images.iterdir()):
        sims.append(compare_analyses(a, analyze(a, p), b, analyze(b, p)).head_similarity)
    np.testing.assert_allclose(mean["head_similarity"], np.mean(sims, axis=0), rtol=1e-5)


def test_compare_needs_two_checkpoints_and_an_image(
    tmp_path: Path, tiny_ckpt: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["compare", str(tmp_path), "--checkpoint", str(tiny_ckpt)]) == 2
    assert "--checkpoint twice" in capsys.readouterr().err
    argv = ["compare", str(tmp_path / "nope.png"), "--checkpoint", str(tiny_ckpt)]
    assert main([*argv, "--checkpoint", str(tiny_ckpt)]) == 2
    assert "no such image" in capsys.readouterr().err
