"""`vitviz-cli explain` on a Swin: the npz equal to ``swin_arrays`` of
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
from vitviz.kinds.swin.analysis import analyze_swin
from vitviz.kinds.swin.export import swin_arrays


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


def _npz(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as npz:
        return {k: npz[k] for k in npz.files}


def test_param_and_fusion_reach_the_swin_rollout(swin_ckpt, photo_files, tmp_path, capsys) -> None:
    """rollout.fusion from --param (and --fusion) is the fusion of the written rollout."""
    from vitviz.kinds.swin.methods import attention_map

    image = photo_files["chelsea"]
    analysis = analyze_swin(load_checkpoint(swin_ckpt), image)
    mean = analysis.rollout("mean").numpy()
    for fusion, extra in (
        ("max", ["--param", "rollout.fusion=max"]),
        ("min", ["--fusion", "min"]),
        ("max", ["--fusion", "min", "--param", "rollout.fusion=max"]),  # --param wins
    ):
        out = tmp_path / f"o_{len(extra)}_{fusion}"
        assert _explain(image, swin_ckpt, out, *extra) == 0, capsys.readouterr().err
        got = _npz(out / f"{image.stem}.npz")["rollout"]
        want = analysis.rollout(fusion).numpy()
        assert np.abs(want - mean).max() > 1e-3, "fusion changes nothing on this model"
        np.testing.assert_allclose(got, want, atol=1e-6, err_msg=" ".join(extra))
    out = tmp_path / "attention"
    code = _explain(
        image, swin_ckpt, out, "--method", "attention", "--param", "attention.layer=1",
        "--param", "attention.head=1",
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    got = _npz(out / f"{image.stem}.npz")["map_attention"]
    want = attention_map(analysis, 1, 1, None).numpy()
    assert np.abs(want - attention_map(analysis, 1, -1, None).numpy()).max() > 1e-4  # head 2
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert (out / f"{image.stem}_attention.png").is_file()


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--param", "rollout.discard_ratio=0.2"], "rollout.discard_ratio"),
        (["--param", "rollout.start_layer=1"], "rollout.start_layer"),
        (
            ["--method", "gradient-rollout", "--param", "gradient-rollout.discard_ratio=0.1"],
            "gradient-rollout.discard_ratio",
        ),
        (["--discard", "0.3"], "--discard 0.3"),
        (["--start-layer", "1"], "--start-layer 1"),
    ],
)
def test_parameters_a_swin_does_not_take_are_refused_by_name(
    extra, named, swin_ckpt, photo_files, tmp_path, capsys
) -> None:
    code = _explain(photo_files["chelsea"], swin_ckpt, tmp_path / "o", *extra)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line]
    assert code == 2 and len(lines) == 1, err
    assert named in lines[0] and "does not apply to a Swin" in lines[0], err
    assert ("discard step" if "discard" in named else "every block") in lines[0], err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--param", "attention.head=1"], "add --method attention"),
        (["--method", "attention", "--param", "attention.layer=9"], "layer must be in -1..3"),
        (
            [
                "--method",
                "attention",
                "--param",
                "attention.layer=0",
                "--param",
                "attention.head=3",
            ],
            "head 3 out of range: block 0 has 2 heads",
        ),
    ],
)
def test_swin_parameter_values_checked_in_one_line(
    extra, said, swin_ckpt, photo_files, tmp_path, capsys
) -> None:
    code = _explain(photo_files["chelsea"], swin_ckpt, tmp_path / "o", *extra)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line]
    assert code == 2 and len(lines) == 1 and said in lines[0], err
    assert "Traceback" not in err


def test_a_folder_and_unused_batch_options(swin_ckpt, photo_files, tmp_path, capsys) -> None:
    """A folder gives its images (as for ViTs); the ViT's batch options are named on stderr."""
    folder = photo_files["chelsea"].parent
    out = tmp_path / "o"
    options = ["--batch-size", "2", "--attention-dtype", "float16", "--full-size"]
    assert _explain(folder, swin_ckpt, out, *options) == 0
    err = capsys.readouterr().err
    assert sorted(p.name for p in out.glob("*.npz")) == sorted(
        f"{p.stem}.npz" for p in photo_files.values()
    )
    notes = [line for line in err.splitlines() if "note:" in line]
    for option in ("--batch-size 2", "--attention-dtype float16", "--full-size"):
        assert sum(option in line and "not used on a Swin" in line for line in notes) == 1, err
    assert len(notes) == 3, err
