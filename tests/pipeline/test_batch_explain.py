"""Many images in batches: ``analyze_batch`` equals ``analyze`` image by
image, and ``vitviz-cli explain`` over a folder with --batch-size writes the files one image at
a time writes (equal within 1e-5), from a writer thread."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import vitviz
from vitviz.checkpoints import LoadedModel, load_checkpoint
from vitviz.cli import main
from vitviz.kinds.vit import batch
from vitviz.kinds.vit.batch import choose_batch_size, iter_analyses
from vitviz.kinds.vit.memory import estimate_analysis
from vitviz.pipeline import export
from vitviz.pipeline.analysis import analyze
from vitviz.pipeline.memory import BUDGET_ENV


@pytest.fixture
def loaded(tiny_ckpt: Path) -> LoadedModel:
    return load_checkpoint(tiny_ckpt)


@pytest.fixture
def folder(tmp_path: Path, photo_files: dict[str, Path]) -> Path:
    """Five images (three photos, two noise images of other sizes) in natural order."""
    out = tmp_path / "images"
    out.mkdir()
    for i, p in enumerate(photo_files.values()):
        shutil.copy(p, out / f"img{i}{p.suffix}")
    rng = np.random.default_rng(0)
    for i, size in ((3, (40, 70)), (4, (90, 33))):
        Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8)).save(out / f"img{i}.png")
    return out


def _images(folder: Path) -> list[Path]:
    return sorted(folder.iterdir())


@pytest.mark.parametrize("batch_size", [2, 5, None])
def test_analyze_batch_equals_analyze_one_by_one(
    loaded: LoadedModel, folder: Path, batch_size: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    images = _images(folder)
    sizes: list[int] = []
    real = batch.capture_batch

    def spy(model, x, *args, **kwargs):
        sizes.append(x.shape[0])
        return real(model, x, *args, **kwargs)

    monkeypatch.setattr(batch, "capture_batch", spy)
    batched = vitviz.analyze_batch(loaded, images, batch_size=batch_size, gradients=True)
    assert len(batched) == len(images)
    assert sizes == {2: [2, 2, 1], 5: [5], None: [5]}[batch_size]  # forward passes run
    for path, b in zip(images, batched, strict=True):
        one = analyze(loaded, path, gradients=True)
        torch.testing.assert_close(b.logits, one.logits, atol=1e-5, rtol=0)
        torch.testing.assert_close(b.attention, one.attention, atol=1e-5, rtol=0)
        for name in ("mean_distance", "entropy", "prefix_share", "token_norms"):
            torch.testing.assert_close(getattr(b, name), getattr(one, name), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(b.rollout(), one.rollout(), atol=1e-5, rtol=0)
        torch.testing.assert_close(b.relevance(), one.relevance(), atol=1e-4, rtol=0)
        assert b.top_class == one.top_class and b.source.size == one.source.size


def test_a_bad_image_is_reported_and_the_others_go_on(
    loaded: LoadedModel, folder: Path, tmp_path: Path
) -> None:
    bad = tmp_path / "broken.png"
    bad.write_bytes(b"not an image")
    images = [*_images(folder)[:2], bad, *_images(folder)[2:]]
    items = list(iter_analyses(loaded, images, batch_size=3))
    assert [i.index for i in items] == list(range(len(images)))
    assert [i.analysis is None for i in items] == [p == bad for p in images]
    assert "broken.png" in str(items[2].error)


def test_the_default_batch_size_comes_from_memory(
    loaded: LoadedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    one = estimate_analysis(loaded.config, (32, 32))
    per_image = one.needed + 2 * one.kept
    monkeypatch.setenv(BUDGET_ENV, str(int(7.5 * per_image / 0.9)))
    assert choose_batch_size(loaded.model, (32, 32)) == 7
    monkeypatch.setenv(BUDGET_ENV, "1K")
    assert choose_batch_size(loaded.model, (32, 32)) == 1  # never less than one
    monkeypatch.setenv(BUDGET_ENV, "1T")
    assert choose_batch_size(loaded.model, (32, 32), limit=12) == 12


def _one_at_a_time(loaded: LoadedModel, images: list[Path], out: Path) -> None:
    """The files of each image as a plain loop over ``analyze`` writes them."""
    out.mkdir()
    for path in images:
        a = analyze(loaded, path, gradients=True)
        settings = export.MapSettings()
        maps = export.compute_maps(a, settings)
        export.write_npz(a, maps, out / f"{path.stem}.npz")
        export.write_pngs(a, maps, out, path.stem, titled=True, settings=settings)  # as the CLI


def test_cli_explain_over_a_folder_in_batches_writes_what_one_at_a_time_does(
    tiny_ckpt: Path,
    folder: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    writers: set[str] = set()
    real = export.write_npz

    def spy(*args, **kwargs):
        writers.add(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(export, "write_npz", spy)
    out = tmp_path / "batched"
    argv = ["explain", str(folder), "--checkpoint", str(tiny_ckpt), "--out", str(out)]
    assert main([*argv, "--batch-size", "2"]) == 0
    assert writers and all(n.startswith("vitviz-writer") for n in writers)  # beside the compute
    err = capsys.readouterr().err
    assert "[1/5] img0.png:" in err and "[5/5] img4.png:" in err and "images/s" in err
    ref = tmp_path / "single"
    _one_at_a_time(load_checkpoint(tiny_ckpt), _images(folder), ref)
    names = sorted(p.name for p in ref.iterdir())
    summaries = ["images.parquet", "run.json"]  # the run's table and record (docs/cluster.md)
    assert sorted(p.name for p in out.iterdir()) == sorted(names + summaries)
    assert len([n for n in names if n.endswith(".npz")]) == 5
    for name in names:
        if name.endswith(".npz"):
            a, b = np.load(out / name), np.load(ref / name)
            assert a.files == b.files
            for key in a.files:
                if a[key].dtype.kind == "f":
                    np.testing.assert_allclose(a[key], b[key], atol=1e-5, rtol=0, err_msg=key)
                else:
                    np.testing.assert_array_equal(a[key], b[key], err_msg=key)
        else:
            pa = np.asarray(Image.open(out / name), dtype=np.int16)
            pb = np.asarray(Image.open(ref / name), dtype=np.int16)
            assert pa.shape == pb.shape
            assert np.abs(pa - pb).max() <= 1, name  # maps within 1e-5: a colour step at most


def test_cli_refuses_a_zero_batch_and_an_empty_folder(
    tiny_ckpt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    base = ["explain", "--checkpoint", str(tiny_ckpt), "--out", str(tmp_path / "o")]
    assert main([*base, str(empty)]) == 2
    assert "holds no images" in capsys.readouterr().err
    assert main([*base, str(empty), "--batch-size", "0"]) == 2
    assert "--batch-size must be at least 1" in capsys.readouterr().err


def test_cli_attention_dtype(
    tiny_ckpt: Path, folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "half"
    argv = ["explain", str(_images(folder)[0]), "--checkpoint", str(tiny_ckpt), "--out", str(out)]
    assert main([*argv, "--attention-dtype", "float16"]) == 0
    assert "attention kept in float16: each probability within a relative 4.9e-04 (2^-11)" in (
        capsys.readouterr().err
    )
    half = np.load(out / "img0.npz")["attention"]
    full_dir = tmp_path / "full"
    assert main([*argv[:-1], str(full_dir)]) == 0
    full = np.load(full_dir / "img0.npz")["attention"]
    assert half.dtype == np.float32 and not np.array_equal(half, full)
    np.testing.assert_allclose(half, full, rtol=2.0**-11, atol=2.0**-25)
