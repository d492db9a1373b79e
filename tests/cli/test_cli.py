"""vitviz-cli: explain writes every number and the overlays; info describes a checkpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from checkpoint_cases import photo, tv_checkpoint
from cli_checks import one_line_error
from conftest import CLASS_NAMES
from PIL import Image

from vitviz.checkpoints import load_checkpoint, save_checkpoint
from vitviz.cli import main
from vitviz.imaging.preprocess import Preprocessing
from vitviz.kinds.vit.analysis import Analysis
from vitviz.pipeline.analysis import analyze

REPO = Path(__file__).resolve().parents[2]

EXPECTED = {  # key: numpy dtype kind (shapes are checked in _check_npz)
    "kind": "U",  # the model kind (one npz vocabulary for every kind)
    "model_name": "U",  # the model's name people know (the file's here)
    "model_arch": "U",
    "input": "f",
    "logits": "f",
    "probs": "f",
    "class_names": "U",
    "attention": "f",
    "grid": "i",
    "num_prefix_tokens": "i",
    "rollout": "f",
    "gradient_rollout": "f",
    "relevance": "f",
    "target_class": "i",
    "mean_distance": "f",
    "entropy": "f",
    "layers": "i",
    "logit_lens": "f",  # the features every explain writes (DESIGN §5)
    "token_norms": "f",
}


def _explain(ckpt: Path, images: list[Path], out: Path, *extra: str) -> int:
    argv = [
        "explain",
        *map(str, images),
        "--checkpoint",
        str(ckpt),
        "--device",
        "cpu",
        "--out",
        str(out),
        *extra,
    ]
    return main(argv)


def _check_npz(npz: Path, a: Analysis, target: int, rollout: np.ndarray) -> None:
    with np.load(npz, allow_pickle=False) as z:
        data = {k: z[k] for k in z.files}
    assert set(data) == set(EXPECTED)
    for key, kind in EXPECTED.items():
        assert data[key].dtype.kind == kind, key
        if kind == "f":
            assert data[key].dtype == np.float32, key
    gh, gw = a.grid
    L, H, N, _ = a.attention.shape
    C = len(CLASS_NAMES)
    assert data["input"].shape == tuple(a.input.shape)
    assert data["input"].shape[0] == 3
    assert data["logits"].shape == data["probs"].shape == (C,)
    assert data["class_names"].tolist() == CLASS_NAMES
    assert str(data["kind"]) == "vit"
    assert str(data["model_arch"]) == "Vision Transformer"
    assert data["attention"].shape == (L, H, N, N)
    assert data["grid"].tolist() == [gh, gw]
    assert data["num_prefix_tokens"].shape == ()
    assert int(data["num_prefix_tokens"]) == a.num_prefix_tokens == N - gh * gw
    for key in ("rollout", "gradient_rollout", "relevance"):
        assert data[key].shape == (gh, gw), key
    assert data["target_class"].shape == ()
    assert int(data["target_class"]) == target
    assert data["mean_distance"].shape == data["entropy"].shape == (L, H)
    assert data["layers"].tolist() == list(range(L))  # every layer kept

    np.testing.assert_allclose(data["input"], a.input.numpy(), atol=1e-6)
    np.testing.assert_allclose(data["logits"], a.logits.numpy(), atol=1e-5)
    np.testing.assert_allclose(data["probs"], a.probs.numpy(), atol=1e-6)
    np.testing.assert_allclose(data["attention"], a.attention.numpy(), atol=1e-6)
    np.testing.assert_allclose(data["rollout"], rollout, atol=1e-5)
    np.testing.assert_allclose(
        data["gradient_rollout"], a.gradient_rollout(target).numpy(), atol=1e-5
    )
    np.testing.assert_allclose(data["relevance"], a.relevance(target).numpy(), atol=1e-5)
    np.testing.assert_allclose(data["mean_distance"], a.mean_distance.numpy(), atol=1e-4)
    np.testing.assert_allclose(data["entropy"], a.entropy.numpy(), atol=1e-5)


def test_explain_writes_npz_and_pngs_with_defaults(
    tmp_path: Path, tiny_ckpt: Path, photo_files: dict[str, Path], capsys: pytest.CaptureFixture
) -> None:
    images = [photo_files["chelsea"], photo_files["rocket"]]
    out = tmp_path / "out"
    assert _explain(tiny_ckpt, images, out) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [f"{stem}{suffix}"
         for stem in ("chelsea", "rocket")
         for suffix in (".npz", "_rollout.png", "_relevance.png", "_heads.png")]
        + ["images.parquet", "run.json"]  # the run's record and table (docs/cluster.md)
    )  # fmt: skip
    loaded = load_checkpoint(tiny_ckpt)
    for image in images:
        a = analyze(loaded, image)
        _check_npz(out / f"{image.stem}.npz", a, a.top_class, a.rollout().numpy())
    err = capsys.readouterr().err
    assert "chelsea" in err and "rocket" in err


def test_explain_honours_class_fusion_discard_and_start_layer(
    tmp_path: Path, tiny_ckpt: Path, photo_files: dict[str, Path]
) -> None:
    image = photo_files["coffee"]
    out = tmp_path / "out"
    loaded = load_checkpoint(tiny_ckpt)
    a = analyze(loaded, image)
    target = int(a.logits.argmin())  # never the default
    assert target != a.top_class
    code = _explain(
        tiny_ckpt,
        [image],
        out,
        "--class",
        str(target),
        "--fusion",
        "max",
        "--discard",
        "0.3",
        "--start-layer",
        "1",
    )
    assert code == 0
    rollout = a.rollout(fusion="max", discard_ratio=0.3, start_layer=1).numpy()
    assert not np.allclose(rollout, a.rollout().numpy())  # the options change the map
    with np.load(out / "coffee.npz") as z:
        np.testing.assert_allclose(
            z["gradient_rollout"],
            a.gradient_rollout(target, discard_ratio=0.3, start_layer=1).numpy(),
            atol=1e-5,
        )
        np.testing.assert_allclose(
            z["relevance"], a.relevance(target, start_layer=1).numpy(), atol=1e-5
        )
        np.testing.assert_allclose(z["rollout"], rollout, atol=1e-5)
        assert int(z["target_class"]) == target


def test_one_bad_image_is_reported_and_the_others_written(
    tmp_path: Path, tiny_ckpt: Path, photo_files: dict[str, Path], capsys: pytest.CaptureFixture
) -> None:
    bad = tmp_path / "broken.png"
    bad.write_bytes(b"this is not a picture at all")
    missing = tmp_path / "gone.jpg"
    out = tmp_path / "out"
    images = [photo_files["chelsea"], bad, missing, photo_files["rocket"]]
    assert _explain(tiny_ckpt, images, out) == 1
    err = capsys.readouterr().err
    assert "broken.png" in err
    assert "gone.jpg" in err
    names = {p.name for p in out.iterdir()}
    for stem in ("chelsea", "rocket"):
        assert {
            f"{stem}.npz",
            f"{stem}_rollout.png",
            f"{stem}_relevance.png",
            f"{stem}_heads.png",
        } <= names
    assert not any(n.startswith(("broken", "gone")) for n in names)
    assert not any(n.endswith(".tmp") for n in names)


def test_all_bad_images_exit_2(
    tmp_path: Path, tiny_ckpt: Path, capsys: pytest.CaptureFixture
) -> None:
    bad = tmp_path / "a.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n truncated")
    code = _explain(tiny_ckpt, [bad, tmp_path / "b.png"], tmp_path / "out")
    assert code == 2
    err = capsys.readouterr().err
    assert "a.png" in err and "b.png" in err
    assert not list((tmp_path / "out").glob("*.npz"))


def test_missing_checkpoint_exits_2_with_one_line(
    tmp_path: Path, photo_files: dict[str, Path], capsys: pytest.CaptureFixture
) -> None:
    code = _explain(tmp_path / "absent.safetensors", [photo_files["chelsea"]], tmp_path / "out")
    assert code == 2
    line = one_line_error(capsys)
    assert "absent.safetensors" in line
    assert "no such file" in line.lower()


def test_unreadable_checkpoint_exits_2_with_one_line(
    tmp_path: Path, photo_files: dict[str, Path], capsys: pytest.CaptureFixture
) -> None:
    ckpt = tmp_path / "junk.pth"
    ckpt.write_bytes(os.urandom(2048))
    assert _explain(ckpt, [photo_files["chelsea"]], tmp_path / "out") == 2
    line = one_line_error(capsys)
    assert "junk.pth" in line
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--class", "5"], ["--class 5", "out of range", "5 classes"]),
        (["--class", "-1"], ["--class -1", "out of range"]),
        (["--discard", "1.0"], ["--discard", "1.0"]),
        (["--discard", "-0.1"], ["--discard", "-0.1"]),
        (["--start-layer", "2"], ["--start-layer 2", "out of range"]),
    ],
)
def test_bad_options_exit_2_with_one_line(
    tmp_path: Path,
    tiny_ckpt: Path,
    photo_files: dict[str, Path],
    capsys: pytest.CaptureFixture,
    extra: list[str],
    words: list[str],
) -> None:
    out = tmp_path / "out"
    assert _explain(tiny_ckpt, [photo_files["chelsea"]], out, *extra) == 2
    line = one_line_error(capsys)
    for word in words:
        assert word in line
    assert not out.exists() or not list(out.iterdir())


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["explain", "a.png", "--methdo", "rollout"], ["--methdo: did you mean --method?"]),
        (["info", "m.safetensors", "--jsn"], ["vitviz-cli info", "--jsn: did you mean --json?"]),
        (["stats", "photos", "--checkpoint", "m.safetensors", "x"], ["stats", "arguments: x."]),
        (["explian", "cat.png"], ["'explian' is not a command. Did you mean explain?"]),
    ],
)
def test_an_unknown_option_is_one_line_naming_the_closest(
    capsys: pytest.CaptureFixture, argv: list[str], words: list[str]
) -> None:
    """A mistyped option or command: exit 2 in one line (not argparse's usage), with the closest
    option or command and where they are listed; nothing runs."""
    assert main(argv) == 2
    line = one_line_error(capsys)
    listed = "`vitviz-cli --help`" if argv[0] == "explian" else f"`vitviz-cli {argv[0]} --help`"
    for word in [*words, listed]:
        assert word in line, line


def test_a_folder_of_sub_folders_names_them_and_the_advice_works(
    tmp_path: Path, tiny_ckpt: Path, photo_files: dict[str, Path], capsys: pytest.CaptureFixture
) -> None:
    """A folder whose images are in sub-folders (a class-per-folder data set): one line naming
    the sub-folders and the formats read; giving a sub-folder, as it says, runs."""
    top = tmp_path / "photos"
    (top / "cats").mkdir(parents=True)
    Image.open(photo_files["chelsea"]).save(top / "cats" / "chelsea.png")
    assert _explain(tiny_ckpt, [top], tmp_path / "out") == 2
    line = one_line_error(capsys)
    assert "no images directly in it" in line and f"give one of them ({top / 'cats'})" in line
    assert "Accepted: PNG, JPEG" in line
    assert _explain(tiny_ckpt, [top / "cats"], tmp_path / "out") == 0
    assert (tmp_path / "out" / "chelsea.npz").is_file()


def test_a_missing_head_count_names_the_flag_where_the_command_has_it(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """settings.md: the CLI names the flags and keys that settle a refusal. A bare torchvision
    ViT without its head count: explain and convert name --heads, and that flag opens it; stats,
    which has no --heads, names only the sidecar and --config; faithfulness takes --heads too."""
    ckpt = tv_checkpoint(tmp_path)
    (tmp_path / "vit.pth.vitviz.json").unlink()  # the weights alone
    image = photo(tmp_path)
    out = tmp_path / "out"
    assert _explain(ckpt, [image], out) == 2
    line = one_line_error(capsys)
    assert "the weights don't say: heads" in line and line.endswith("--heads 2."), line
    assert main(["convert", str(ckpt), str(tmp_path / "c.safetensors")]) == 2
    assert one_line_error(capsys).endswith("On the command line: --heads 2.")
    assert main(["stats", str(tmp_path), "--checkpoint", str(ckpt), "--out", str(out)]) == 2
    assert "--heads" not in one_line_error(capsys)
    assert _explain(ckpt, [image], out, "--heads", "2") == 0
    faith = ["faithfulness", str(image), "--checkpoint", str(ckpt), "--method", "random"]
    assert main([*faith, "--steps", "2", "--out", str(tmp_path / "f"), "--heads", "2"]) == 0


def test_info_prints_family_and_config(tiny_ckpt: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["info", str(tiny_ckpt)]) == 0
    text = capsys.readouterr().out
    assert "vitviz" in text
    assert "dim 32" in text
    assert "depth 2" in text
    assert "heads 2" in text
    assert "patch 8" in text
    assert "5" in text and CLASS_NAMES[0] in text


def test_info_prints_crop_pct_rounded_with_its_crop(
    tmp_path: Path, tiny_model, capsys: pytest.CaptureFixture
) -> None:
    """timm's 224/232 is 0.9655172413793104: printed as 0.966 and the crop it makes."""
    for crop, size, shown in (
        (224 / 232, 224, "crop_pct 0.966 (the 224×224 centre of 232×232),"),
        (0.875, 32, "crop_pct 0.875 (the 32×32 centre of 36×36),"),
        (1.0, 32, "crop_pct 1,"),
    ):
        prep = Preprocessing(image_size=(size, size), crop_pct=crop)
        path = save_checkpoint(tiny_model, tmp_path / f"c{size}.safetensors", preprocessing=prep)
        assert main(["info", str(path)]) == 0
        line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("preproc"))
        assert shown in line, line
        assert "0.96551" not in line
        assert main(["info", str(path), "--json"]) == 0  # the JSON keeps every digit
        assert json.loads(capsys.readouterr().out)["preprocessing"]["crop_pct"] == crop


def test_info_json(tiny_ckpt: Path, tiny_model, capsys: pytest.CaptureFixture) -> None:
    assert main(["info", str(tiny_ckpt), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    loaded = load_checkpoint(tiny_ckpt)
    assert d["family"] == "vitviz"
    assert d["config"] == tiny_model.config.to_dict()
    assert d["num_classes"] == 5
    assert d["preprocessing"] == loaded.preprocessing.to_dict()
    assert d["class_names"] == CLASS_NAMES
    assert d["num_parameters"] == sum(p.numel() for p in tiny_model.parameters())


def test_info_on_a_bad_checkpoint_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    empty = tmp_path / "empty.safetensors"
    empty.touch()
    assert main(["info", str(empty)]) == 2
    line = one_line_error(capsys)
    assert "empty.safetensors" in line


def _repo_env() -> dict[str, str]:
    """The environment with this checkout first on PYTHONPATH, for a child Python."""
    path = [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}


def test_console_entry_point_end_to_end(
    tmp_path: Path, tiny_ckpt: Path, photo_files: dict[str, Path]
) -> None:
    out = tmp_path / "out"
    env = _repo_env()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "vitviz.cli",
            "explain",
            str(photo_files["chelsea"]),
            "--checkpoint",
            str(tiny_ckpt),
            "--device",
            "cpu",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "chelsea" in proc.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        "chelsea.npz",
        "chelsea_heads.png",
        "chelsea_relevance.png",
        "chelsea_rollout.png",
        "images.parquet",
        "run.json",
    ]
    a = analyze(load_checkpoint(tiny_ckpt), photo_files["chelsea"])
    with np.load(out / "chelsea.npz") as z:
        assert torch.allclose(torch.from_numpy(z["logits"]), a.logits, atol=1e-5)
        assert int(z["target_class"]) == a.top_class
    with Image.open(out / "chelsea_rollout.png") as im:
        # skimage's chelsea (451 × 300), not the model's 32 × 32, under a title, beside a bar
        assert im.width > 451 and im.height > 300


def test_python_m_vitviz_cli_refuses_in_one_line(tmp_path: Path, tiny_ckpt: Path) -> None:
    """``python -m vitviz.cli`` runs the file as __main__; a subcommand's refusal (raised with
    the imported module's CliError) is still one line and exit 2, not a traceback."""
    env = _repo_env()
    args = ["explain", "x.png", "--checkpoint", str(tiny_ckpt), "--method", "nope"]
    proc = subprocess.run(
        [sys.executable, "-m", "vitviz.cli", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        line for line in proc.stderr.strip().splitlines() if "unknown method 'nope'" in line
    ]


def test_unknown_device_and_unreadable_config_exit_2(
    tmp_path: Path, tiny_ckpt: Path, photo_files: dict[str, Path], capsys: pytest.CaptureFixture
) -> None:
    image = str(photo_files["chelsea"])
    argv = ["explain", image, "--checkpoint", str(tiny_ckpt), "--out", str(tmp_path / "o")]
    assert main([*argv, "--device", "abacus"]) == 2
    assert "abacus" in one_line_error(capsys)
    assert main([*argv, "--device", "cpu", "--config", str(tmp_path / "nope.json")]) == 2
    assert "nope.json" in one_line_error(capsys)


def test_output_folder_that_is_a_file_exits_2_with_one_line(
    tmp_path: Path, tiny_ckpt: Path, photo_files: dict[str, Path], capsys: pytest.CaptureFixture
) -> None:
    """Exit 2 means 'nothing could be done'; a bad --out must not end in a traceback."""
    not_a_folder = tmp_path / "results"
    not_a_folder.write_text("an ordinary file")
    assert _explain(tiny_ckpt, [photo_files["chelsea"]], not_a_folder) == 2
    assert "results" in one_line_error(capsys)
    assert not_a_folder.read_text() == "an ordinary file"


def test_same_stem_twice_gets_two_outputs(
    tmp_path: Path, tiny_ckpt: Path, photo_files: dict[str, Path]
) -> None:
    other = tmp_path / "elsewhere" / "chelsea.png"
    other.parent.mkdir()
    with Image.open(photo_files["coffee"]) as im:
        im.convert("RGB").save(other)
    out = tmp_path / "out"
    assert _explain(tiny_ckpt, [photo_files["chelsea"], other], out) == 0
    npzs = sorted(out.glob("*.npz"))
    assert len(npzs) == 2
    loaded = load_checkpoint(tiny_ckpt)
    inputs = {
        tuple(analyze(loaded, p).input.flatten()[:64].tolist())
        for p in (photo_files["chelsea"], other)
    }
    written = set()
    for npz in npzs:
        with np.load(npz) as z:
            written.add(tuple(z["input"].flatten()[:64].tolist()))
    assert written == inputs  # neither image overwrote the other


# -- checkpoints and settings that used to end in a raw traceback --------------


def _nan_weight(state: dict) -> dict:
    w = state["conv_proj.weight"].clone()
    w[0, 0, 0, 0] = float("nan")
    return {**state, "conv_proj.weight": w}


ITEM5_CASES = {  # name: (edit of the state dict, sidecar settings, explain's words, info refuses)
    "int8-weight": (
        lambda s: {**s, "conv_proj.weight": s["conv_proj.weight"].to(torch.int8)},
        {},
        ["conv_proj.weight holds int8", "floating-point weights"],
        True,
    ),
    "non-string-key": (lambda s: {**s, 0: torch.zeros(1)}, {}, ["not a name"], True),
    "nan-weights": (_nan_weight, {}, ["skipped", "logits are NaN"], False),
    "mean-1e308": (None, {"preprocessing": {"mean": 1e308}}, ["beyond float32's range"], True),
    "image-size-32.5": (None, {"image_size": 32.5}, ["image_size must be a whole number"], True),
    "preprocessing-60": (None, {"preprocessing": {"image_size": 60}}, ["not a multiple"], True),
    "preprocessing-8192": (
        None,
        {"preprocessing": {"image_size": 8192}},
        ["skipped", "input size 8192×8192", "1,048,577 tokens", "TB of memory"],
        False,
    ),
}


@pytest.mark.parametrize("case", list(ITEM5_CASES))
def test_hostile_checkpoints_and_settings_end_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture, case: str
) -> None:
    edit, settings, words, info_refuses = ITEM5_CASES[case]
    ckpt = tv_checkpoint(tmp_path, settings=settings, edit=edit)
    out = tmp_path / "out"
    assert _explain(ckpt, [photo(tmp_path)], out) == 2
    line = one_line_error(capsys)
    assert line.startswith("vitviz-cli: ") and "Traceback" not in line
    for word in words:
        assert word in line, line
    assert not out.exists() or not list(out.glob("*.npz"))
    code = main(["info", str(ckpt)])
    if info_refuses:
        assert code == 2 and one_line_error(capsys) == line
    else:
        assert code == 0
        assert "Traceback" not in capsys.readouterr().err


def test_explain_refuses_an_image_size_over_the_memory_budget(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """{"image_size": 1024} on the 32-px model: 16,385 tokens, tens of GB; with a 2 GB budget it
    is refused at once, naming the size, the tokens and the memory needed vs free."""
    monkeypatch.setenv("VITVIZ_MEMORY_BUDGET", "2G")
    ckpt = tv_checkpoint(tmp_path, settings={"preprocessing": {"image_size": 1024}})
    assert _explain(ckpt, [photo(tmp_path)], tmp_path / "out") == 2
    line = one_line_error(capsys)
    for word in ("input size 1024×1024", "16,385 tokens", "GB of memory", "2.0 GB is free"):
        assert word in line, line


@pytest.mark.parametrize("suffix", [".safetensors", ".pth"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_explain_and_info_on_half_precision_weights(
    tmp_path: Path, capsys: pytest.CaptureFixture, suffix: str, dtype: torch.dtype
) -> None:
    def halved(state: dict) -> dict:
        return {k: v.to(dtype) for k, v in state.items()}

    def rounded(state: dict) -> dict:
        return {k: v.to(dtype).float() for k, v in state.items()}

    image = photo(tmp_path)
    half = tv_checkpoint(tmp_path, f"half{suffix}", edit=halved)
    ref = tv_checkpoint(tmp_path, f"ref{suffix}", edit=rounded)
    assert _explain(half, [image], tmp_path / "half") == 0
    assert _explain(ref, [image], tmp_path / "ref") == 0
    with (
        np.load(tmp_path / "half" / "photo.npz") as got,
        np.load(tmp_path / "ref" / "photo.npz") as want,
    ):
        for key in ("logits", "attention", "rollout", "relevance"):
            assert np.abs(got[key] - want[key]).max() <= 1e-3, key
    capsys.readouterr()
    assert main(["info", str(half)]) == 0
    name = str(dtype).removeprefix("torch.")
    assert f"{name} tensors loaded as float32" in capsys.readouterr().out


def test_a_reader_that_leaves_early_ends_without_a_traceback(tmp_path: Path) -> None:
    """`vitviz-cli methods --json | head -1`: the closed pipe is not a crash."""
    env = _repo_env()
    # The child writes far more than a pipe holds after the reader has closed its end.
    code = "import sys; from vitviz.cli import main; sys.exit(main(['methods', '--json']))"
    read_end, write_end = os.pipe()
    os.close(read_end)  # nobody reads: the first flush fails with EPIPE
    proc = subprocess.run(
        [sys.executable, "-c", code],
        stdout=write_end,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
        check=False,
    )
    os.close(write_end)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2
