"""``vitviz-cli stats``: head statistics over a folder equal the mean (and
standard deviation) of the per-image statistics, for each checkpoint, in stats.csv; a plot with
one colour per checkpoint."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import CLASS_NAMES, random_vit
from PIL import Image

from vitviz.checkpoints import load_checkpoint, save_checkpoint
from vitviz.cli import main
from vitviz.imaging.curves import PALETTE
from vitviz.pipeline.analysis import analyze

HEADER = [
    "checkpoint", "layer", "head", "images", "distance_mean", "distance_std", "entropy_mean",
    "entropy_std", "prefix_share_mean", "prefix_share_std",
]  # fmt: skip


@pytest.fixture
def folder(tmp_path: Path, photo_files: dict[str, Path]) -> Path:
    out = tmp_path / "images"
    out.mkdir()
    for p in photo_files.values():
        shutil.copy(p, out / p.name)
    rng = np.random.default_rng(1)
    Image.fromarray(rng.integers(0, 256, (50, 64, 3), dtype=np.uint8)).save(out / "noise.png")
    return out


def test_stats_over_a_folder_equal_the_mean_of_per_image_statistics(
    tmp_path: Path, tiny_ckpt: Path, folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = save_checkpoint(random_vit(seed=7), tmp_path / "epoch1.safetensors",
                            class_names=CLASS_NAMES)  # fmt: skip
    out = tmp_path / "out"
    argv = ["stats", str(folder), "--checkpoint", str(tiny_ckpt), "--checkpoint", str(other)]
    assert main([*argv, "--out", str(out), "--batch-size", "3"]) == 0
    with open(out / "stats.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == HEADER
    images = sorted(folder.iterdir())
    for ckpt in (tiny_ckpt, other):
        loaded = load_checkpoint(ckpt)
        per_image = [analyze(loaded, p) for p in images]  # one at a time, the reference
        mine = [r for r in rows[1:] if r[0] == str(ckpt)]
        L, H = per_image[0].mean_distance.shape
        assert len(mine) == L * H
        assert [(int(r[1]), int(r[2])) for r in mine] == [
            (i, j) for i in range(L) for j in range(H)
        ]
        assert {r[3] for r in mine} == {str(len(images))}
        got = np.array([[float(v) for v in r[4:]] for r in mine]).reshape(L, H, 6)
        for k, name in enumerate(("mean_distance", "entropy", "prefix_share")):
            stack = np.stack([getattr(a, name).numpy() for a in per_image]).astype(np.float64)
            np.testing.assert_allclose(got[..., 2 * k], stack.mean(0), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(got[..., 2 * k + 1], stack.std(0), rtol=1e-4, atol=1e-6)
    # the two checkpoints differ (their own statistics, not one copied)
    a = np.array([float(r[4]) for r in rows[1:] if r[0] == str(tiny_ckpt)])
    b = np.array([float(r[4]) for r in rows[1:] if r[0] == str(other)])
    assert not np.allclose(a, b)
    plot = np.asarray(Image.open(out / "stats.png").convert("RGB"), dtype=np.int32)
    for colour in PALETTE[:2]:  # one colour per checkpoint
        near = np.abs(plot - np.array(colour)).sum(-1) < 30
        assert near.sum() > 10, f"no dots of colour {colour}"
    assert "stats.csv" in capsys.readouterr().err


def test_stats_refuses_an_empty_folder_and_reports_bad_images(
    tmp_path: Path, tiny_ckpt: Path, folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["stats", str(empty), "--checkpoint", str(tiny_ckpt)]) == 2
    assert "holds no images" in capsys.readouterr().err
    (folder / "broken.png").write_bytes(b"no")
    out = tmp_path / "o"
    assert main(["stats", str(folder), "--checkpoint", str(tiny_ckpt), "--out", str(out)]) == 1
    assert "skipped" in capsys.readouterr().err
    with open(out / "stats.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert {r[3] for r in rows[1:]} == {"4"}  # the four readable images


def test_stats_of_a_swin_average_each_blocks_own_heads(tmp_path: Path, folder: Path) -> None:
    """Every kind's statistics (its ``head_statistics``): a Swin's blocks have different numbers
    of heads, so each block writes its own heads' rows and no row of a head it lacks."""
    import torch
    from swin_helpers import tiny_torchvision_swin

    from vitviz.kinds.swin.analysis import analyze_swin
    from vitviz.kinds.swin.stats import swin_head_statistics

    ckpt = tmp_path / "swin.pth"
    torch.save(tiny_torchvision_swin(seed=3).state_dict(), ckpt)
    out = tmp_path / "out"
    assert main(["stats", str(folder), "--checkpoint", str(ckpt), "--out", str(out)]) == 0
    with open(out / "stats.csv", newline="") as f:
        rows = list(csv.reader(f))[1:]
    loaded = load_checkpoint(ckpt)
    images = sorted(folder.iterdir())
    per_image = []
    for p in images:
        a = analyze_swin(loaded, p)
        per_image.append(swin_head_statistics(a.attentions, a.layouts, a.block_stages, 4))
    heads = [int(d.shape[0]) for d in per_image[0][0]]
    assert len(set(heads)) > 1  # the test needs blocks with different numbers of heads
    assert [(int(r[1]), int(r[2])) for r in rows] == [
        (b, h) for b, n in enumerate(heads) for h in range(n)
    ]
    for k, column in ((0, 4), (1, 6)):  # distance, entropy: the mean over the images
        want = np.concatenate(
            [np.mean([s[k][b].numpy() for s in per_image], axis=0) for b in range(len(heads))]
        )
        np.testing.assert_allclose([float(r[column]) for r in rows], want, rtol=1e-5)
    assert {r[8] for r in rows} == {"nan"}  # no prefix tokens: no prefix share
    with Image.open(out / "stats.png") as plot:
        assert plot.size[0] > 100
