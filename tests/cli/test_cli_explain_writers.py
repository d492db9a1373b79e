"""``vitviz-cli explain`` over a folder writes each image's files on several writer threads:
every file once, each the same as one writer thread writes."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from vitviz.cli import explain_batch, main


def _run(folder: Path, out: Path, ckpt: Path) -> dict[str, Path]:
    code = main(["explain", str(folder), "--checkpoint", str(ckpt), "--out", str(out),
                 "--batch-size", "2"])  # fmt: skip
    assert code == 0
    summaries = ("images.parquet", "run.json")  # the run's table and record: its timing differs
    return {p.name: p for p in sorted(out.iterdir()) if p.name not in summaries}


def test_several_writer_threads_write_what_one_writes(
    tmp_path: Path, tiny_ckpt: Path, photo_files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "photos"
    folder.mkdir()
    for i in range(2):  # more images than writers, in more batches than one
        for name, path in photo_files.items():
            shutil.copy(path, folder / f"{i}-{name}{path.suffix}")
    monkeypatch.setattr(explain_batch, "writer_threads", lambda: 1)
    one = _run(folder, tmp_path / "one", tiny_ckpt)
    monkeypatch.setattr(explain_batch, "writer_threads", lambda: 3)
    three = _run(folder, tmp_path / "three", tiny_ckpt)
    assert list(three) == list(one) and len(one) == 6 * 4  # npz + rollout, relevance, heads
    assert not [n for n in three if n.endswith(".tmp")]
    for name, path in one.items():
        if name.endswith(".npz"):
            with np.load(path) as a, np.load(three[name]) as b:
                assert sorted(a.files) == sorted(b.files)
                for key in a.files:
                    np.testing.assert_array_equal(a[key], b[key], err_msg=f"{name}: {key}")
        else:
            assert path.read_bytes() == three[name].read_bytes(), name


def test_writer_threads_leave_a_core_to_the_computation(monkeypatch: pytest.MonkeyPatch) -> None:
    for cores, threads in ((None, 1), (1, 1), (2, 1), (3, 2), (16, explain_batch.MAX_WRITERS)):
        monkeypatch.setattr(explain_batch.os, "cpu_count", lambda c=cores: c)
        assert explain_batch.writer_threads() == threads


def test_a_file_that_fails_to_write_is_reported_and_the_run_goes_on(
    tmp_path: Path,
    tiny_ckpt: Path,
    photo_files: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    from vitviz.pipeline import export

    real = export.write_npz

    def failing(analysis, maps, path, *args, **kwargs):  # one image's writer raises, not OSError
        if Path(path).stem == "chelsea":
            raise RuntimeError("a map that can't be written")
        return real(analysis, maps, path, *args, **kwargs)

    monkeypatch.setattr(export, "write_npz", failing)
    folder = tmp_path / "photos"
    folder.mkdir()
    for name, path in photo_files.items():
        shutil.copy(path, folder / f"{name}{path.suffix}")
    out = tmp_path / "out"
    code = main(["explain", str(folder), "--checkpoint", str(tiny_ckpt), "--out", str(out)])
    assert code == 1  # some inputs failed, the others written
    assert sorted(p.name for p in out.glob("*.npz")) == ["coffee.npz", "rocket.npz"]
    err = capsys.readouterr().err
    assert "could not write" in err and "a map that can't be written" in err
