"""`vitviz-cli explain` on a Swin: the npz of issue 16 item 2 equal to ``swin_arrays`` of
``analyze_swin`` on the same image, the rollout PNG, and --method names a Swin can't take refused
in one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from swin_helpers import tiny_torchvision_swin

from vitviz import cli
from vitviz.checkpoints import load_checkpoint
from vitviz.explain.swin_analysis import analyze_swin
from vitviz.explain.swin_export import swin_arrays


@pytest.fixture
def swin_ckpt(tmp_path: Path) -> Path:
    path = tmp_path / "swin_t_tiny.pth"
    torch.save(tiny_torchvision_swin().state_dict(), path)
    return path


def _explain(image: Path, ckpt: Path, out: Path, *extra: str) -> int:
    return cli.main(["explain", str(image), "--checkpoint", str(ckpt), "--out", str(out), *extra])


def test_npz_equals_swin_arrays_and_rollout_png(swin_ckpt, photo_files, tmp_path, capsys) -> None:
    image = photo_files["chelsea"]
    out = tmp_path / "out"
    assert _explain(image, swin_ckpt, out) == 0, capsys.readouterr().err
    loaded = load_checkpoint(swin_ckpt)
    expected = swin_arrays(analyze_swin(loaded, image))
    with np.load(out / f"{image.stem}.npz") as npz:
        got = {k: npz[k] for k in npz.files}
    assert set(expected) <= set(got)
    assert {"window_attention_0_1", "window_attention_1_0", "class_names", "input"} <= set(got)
    for key, value in expected.items():
        assert got[key].shape == value.shape, key
        np.testing.assert_allclose(got[key], value, atol=1e-6, err_msg=key)
    assert list(got["class_names"]) == list(loaded.class_names)
    analysis = analyze_swin(loaded, image)
    np.testing.assert_allclose(got["input"], analysis.input.numpy(), atol=1e-6)
    assert (got["shift"][1] > 0).all() and (got["shift"][0] == 0).all()  # block 0 W, block 1 SW
    png = out / f"{image.stem}_rollout.png"
    from PIL import Image

    with Image.open(png) as picture:
        assert picture.size == analysis.pixels.shape[1::-1]


def test_gradcam_method_writes_its_png(swin_ckpt, photo_files, tmp_path, capsys) -> None:
    image = photo_files["chelsea"]
    out = tmp_path / "out"
    assert _explain(image, swin_ckpt, out, "--method", "gradient-rollout", "gradcam") == 0
    assert (out / f"{image.stem}_gradient-rollout.png").is_file()
    assert (out / f"{image.stem}_gradcam.png").is_file()


@pytest.mark.parametrize("method", ["relevance", "dino-masks"])
def test_cls_methods_refused_in_one_line(method, swin_ckpt, photo_files, tmp_path, capsys) -> None:
    code = _explain(photo_files["chelsea"], swin_ckpt, tmp_path / "o", "--method", method)
    err = capsys.readouterr().err
    assert code == 2
    lines = [line for line in err.splitlines() if line]
    assert len(lines) == 1 and method in lines[0] and "CLS token" in lines[0], err
    assert "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_class_out_of_range_refused(swin_ckpt, photo_files, tmp_path, capsys) -> None:
    code = _explain(photo_files["chelsea"], swin_ckpt, tmp_path / "o", "--class", "5")
    err = capsys.readouterr().err
    assert code == 2 and "--class 5 is out of range: the model has 5 classes" in err, err
