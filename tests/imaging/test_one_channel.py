"""A one-channel model end to end: an MNIST-style vit-pytorch ViT (``channels=1``, trained with
``Normalize((0.1307,), (0.3081,))``) opened from its state dict and sidecar, run on the grayscale
of real photos through the Python API, the CLI and the window, each compared with the model run
by hand on the same input preprocessed by hand (torchvision's Grayscale, Resize, CenterCrop,
ToTensor, Normalize). Also: one-channel training from a folder of grayscale PNGs, and the
"preprocessing assumed" note only when the sidecar does not give the preprocessing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision.transforms as T
from PIL import Image
from skimage import data
from test_zoo_tutorial import LucidViT
from zoo_helpers import ATTN_ATOL, LOGIT_ATOL, assert_attention, assert_close, randomize_

from vitviz.checkpoints import load_checkpoint
from vitviz.cli import main
from vitviz.imaging import Preprocessing
from vitviz.kinds.vit.pictures import map_overlay
from vitviz.pipeline.analysis import analyze

MNIST_MEAN, MNIST_STD = 0.1307, 0.3081
WAIT_MS = 20_000
SIDECAR = {
    "image_size": 28,
    "patch_size": 4,
    "heads": 4,
    "preprocessing": {"mean": [MNIST_MEAN], "std": [MNIST_STD]},
}


def mnist_vit() -> LucidViT:
    """vit-pytorch's ViT(image_size=28, patch_size=4, num_classes=10, dim=64, depth=2,
    heads=4, dim_head=16, mlp_dim=128, channels=1), random weights."""
    torch.manual_seed(13)
    model = LucidViT(4, 16, "cls", image=(28, 28), patch=4, dim=64, mlp=128, channels=1, classes=10)
    return randomize_(model, seed=13)


def save_mnist(folder: Path, model: LucidViT, sidecar: dict | None = SIDECAR) -> Path:
    """The state dict as .pth with ``<name>.vitviz.json`` beside it."""
    path = folder / "mnist_vit.pth"
    torch.save(model.state_dict(), path)
    if sidecar is not None:
        (folder / "mnist_vit.pth.vitviz.json").write_text(json.dumps(sidecar))
    return path


@pytest.fixture
def mnist(tmp_path: Path) -> tuple[LucidViT, Path]:
    model = mnist_vit()
    return model, save_mnist(tmp_path, model)


@pytest.fixture(scope="module")
def gray_photos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """camera.png: a grayscale photo (mode L, 512 × 512); chelsea.png: a colour one (451 × 300),
    which a one-channel model sees as its luma."""
    folder = tmp_path_factory.mktemp("gray")
    Image.fromarray(data.camera()).save(folder / "camera.png")
    Image.fromarray(data.chelsea()).save(folder / "chelsea.png")
    return {"camera": folder / "camera.png", "chelsea": folder / "chelsea.png"}


HAND_RESIZE = T.Compose(
    [
        T.Grayscale(num_output_channels=1),
        T.Resize(28, interpolation=T.InterpolationMode.BILINEAR),
        T.CenterCrop(28),
    ]
)
HAND_TENSOR = T.Compose([T.ToTensor(), T.Normalize((MNIST_MEAN,), (MNIST_STD,))])


def by_hand(model: LucidViT, path: Path) -> tuple[Image.Image, torch.Tensor, torch.Tensor, list]:
    """The photo preprocessed by hand (gray 28 × 28, tensor (1, 28, 28)) and the model's logits
    (10,) and attention per layer, L × (1, H, N, N)."""
    with Image.open(path) as image:
        gray = HAND_RESIZE(image)
    x = HAND_TENSOR(gray)
    with torch.no_grad():
        logits = model(x[None])[0]
    return gray, x, logits, [layer[0].last for layer in model.transformer.layers]


def is_gray(rgb: np.ndarray) -> bool:
    return rgb.ndim == 3 and rgb.shape[2] == 3 and bool((rgb == rgb[..., :1]).all())


# -- (a) the Python API ----------------------------------------------------------------------------
@pytest.mark.parametrize("photo", ["camera", "chelsea"])
def test_api_matches_the_model_run_by_hand(mnist, gray_photos, photo: str) -> None:
    model, path = mnist
    loaded = load_checkpoint(path)
    assert loaded.family == "vit-pytorch" and loaded.config.in_channels == 1
    prep = loaded.preprocessing
    assert (prep.channels, prep.mean, prep.std) == (1, (MNIST_MEAN,), (MNIST_STD,))
    gray, x, ref_logits, ref_attn = by_hand(model, gray_photos[photo])

    a = analyze(loaded, gray_photos[photo])
    assert a.input.shape == (1, 28, 28)
    assert_close("input", x, a.input, 1e-6)
    assert_close("logits", ref_logits, a.logits, LOGIT_ATOL)
    assert_attention(ref_attn, [layer[None] for layer in a.attention])
    # Shown as gray: the model input, the source and the overlays drawn on it.
    assert is_gray(a.pixels) and np.array_equal(a.pixels[..., 0], np.asarray(gray))
    with Image.open(gray_photos[photo]) as image:
        luma = np.asarray(image.convert("L"))
    assert a.source is not None and np.array_equal(np.asarray(a.source)[..., 0], luma)
    assert is_gray(np.asarray(a.source))
    assert is_gray(np.asarray(map_overlay(a, a.rollout().numpy(), opacity=0.0)))


def test_channel_mismatch_is_one_line_before_the_forward_pass(mnist, gray_photos) -> None:
    model, path = mnist
    loaded = load_checkpoint(path)
    calls: list[int] = []
    loaded.model.patch_embed.register_forward_pre_hook(lambda *_: calls.append(1))
    rgb = Preprocessing(28, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))
    with pytest.raises(ValueError) as info:
        analyze(loaded, gray_photos["camera"], preprocessing=rgb)
    assert str(info.value).startswith(
        "the preprocessing makes 3-channel inputs but the model takes 1-channel images"
    )
    with pytest.raises(ValueError, match=r"must be \(1, H, W\) or \(1, 1, H, W\)"):
        analyze(loaded, torch.zeros(3, 28, 28))
    assert calls == []  # refused before the model ran
    assert "\n" not in str(info.value)
    # An already normalised (1, 28, 28) tensor is taken as it is.
    _, x, ref_logits, _ = by_hand(model, gray_photos["camera"])
    assert_close("logits", ref_logits, analyze(loaded, x).logits, LOGIT_ATOL)


# -- (b) the CLI -----------------------------------------------------------------------------------
def test_cli_explain_matches_the_model_run_by_hand(mnist, gray_photos, tmp_path: Path) -> None:
    model, path = mnist
    out = tmp_path / "out"
    images = [str(gray_photos["camera"]), str(gray_photos["chelsea"])]
    code = main(
        ["explain", *images, "--checkpoint", str(path), "--device", "cpu", "--out", str(out)]
    )
    assert code == 0
    for name in ("camera", "chelsea"):
        _, x, ref_logits, ref_attn = by_hand(model, gray_photos[name])
        with np.load(out / f"{name}.npz") as npz:
            assert npz["input"].shape == (1, 28, 28)
            assert_close("npz input", x, torch.from_numpy(npz["input"]), 1e-6)
            assert_close("npz logits", ref_logits, torch.from_numpy(npz["logits"]), LOGIT_ATOL)
            attention = torch.from_numpy(npz["attention"])  # (L, H, N, N)
            assert attention.shape == (2, 4, 50, 50)
            for layer, ref in enumerate(ref_attn):
                assert_close(f"npz attention {layer}", ref[0], attention[layer], ATTN_ATOL)
        for suffix in ("rollout", "relevance", "heads"):
            with Image.open(out / f"{name}_{suffix}.png") as png:
                assert png.mode == "RGB" and png.size[0] > 0


@pytest.mark.parametrize("extra", [{}, {"in_channels": 1}])
def test_cli_refuses_rgb_numbers_for_a_gray_model_in_one_line(
    tmp_path: Path, gray_photos, capsys: pytest.CaptureFixture[str], extra: dict
) -> None:
    """The issue's case: three numbers for a one-channel model was a matmul traceback."""
    sidecar = {**SIDECAR, **extra, "preprocessing": {"mean": [0.5] * 3, "std": [0.5] * 3}}
    path = save_mnist(tmp_path, mnist_vit(), sidecar)
    code = main(["explain", str(gray_photos["camera"]), "--checkpoint", str(path)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("vitviz-cli: mnist_vit.pth: the preprocessing is invalid: mean must be ")
    assert "one number (the model takes 1-channel, grayscale images)" in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "vitviz-out").exists()


# -- the "preprocessing assumed" note --------------------------------------------------------------
@pytest.mark.parametrize("channels", [1, 3])
def test_preprocessing_note_only_when_the_sidecar_does_not_give_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], channels: int
) -> None:
    model = randomize_(LucidViT(4, 16, "cls", image=(28, 28), patch=4, channels=channels), 3)
    given = {"mean": [0.2] * channels, "std": [0.3] * channels}
    bare = {k: v for k, v in SIDECAR.items() if k != "preprocessing"}
    path = save_mnist(tmp_path, model, {**bare, "preprocessing": given})
    assert main(["info", str(path)]) == 0
    text = capsys.readouterr().out
    assert "preprocessing assumed" not in text
    assert f"mean {given['mean']}, std {given['std']}" in text
    assert not any("preprocessing assumed" in n for n in load_checkpoint(path).notes)

    save_mnist(tmp_path, model, bare)  # the sidecar without preprocessing: the note is there
    assert main(["info", str(path)]) == 0
    text = capsys.readouterr().out
    expected = (
        "preprocessing assumed: ImageNet mean/std"
        if channels == 3
        else "preprocessing assumed: mean 0.5 and std 0.5 (a 1-channel model)"
    )
    assert f"note:           {expected}; set preprocessing in mnist_vit.pth.vitviz.json" in text


# -- (c) the window --------------------------------------------------------------------------------
def test_window_shows_the_one_channel_prediction(qtbot, tmp_path: Path, mnist, gray_photos) -> None:
    from test_ui_window import drop, new_window, wait_shown

    _, path = mnist
    window = new_window(qtbot, tmp_path / "settings" / "vitviz.ini")
    bugs: list[tuple[str, str]] = []
    window.notifier.bugReported.connect(lambda summary, details: bugs.append((summary, details)))
    photo = gray_photos["chelsea"]  # a colour photo: the window must show what the model saw
    drop(window, [photo, path])
    wait_shown(qtbot, window, photo.name)
    ref = analyze(load_checkpoint(path), photo)
    top = ref.top_k(5)
    chart = window.viewer.predictions
    assert chart.indices == [p.index for p in top]
    np.testing.assert_allclose(chart.probs, [p.probability for p in top], atol=1e-6)
    assert window.viewer.image.top_class == ref.top_class
    np.testing.assert_allclose(window.viewer.image.logits, ref.logits.numpy(), atol=1e-6)
    shown_input = window.viewer.input_view.image.image
    assert is_gray(shown_input) and np.array_equal(shown_input, ref.pixels)
    shown_source = window.viewer.map_view.image.image
    assert is_gray(shown_source) and np.array_equal(shown_source, np.asarray(ref.source))

    # Model ▸ preprocessing: one number each for mean and std of a one-channel model.
    window.act_model_info.trigger()
    dialog = window.info_dialog
    assert dialog.mean.text() == "0.1307" and dialog.std.text() == "0.3081"
    dialog.mean.setText("0.2")
    dialog.std.setText("0.4")
    before = window.viewer.image
    dialog._apply()
    qtbot.waitUntil(
        lambda: window.viewer.image is not before and window.viewer.image is not None,
        timeout=WAIT_MS,
    )
    assert window.model.preprocessing["mean"] == [0.2]
    assert window.model.preprocessing["std"] == [0.4]
    loaded = load_checkpoint(path)
    prep = Preprocessing.from_dict({**loaded.preprocessing.to_dict(), "mean": 0.2, "std": 0.4})
    expected = analyze(loaded, photo, preprocessing=prep)
    np.testing.assert_allclose(window.viewer.image.logits, expected.logits.numpy(), atol=1e-6)
    assert not bugs, bugs


# -- training on a folder of grayscale images ------------------------------------------------------
def test_training_on_grayscale_pngs_gives_a_one_channel_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gray_photos
) -> None:
    from vitviz.training import TrainConfig
    from vitviz.training.loop import run_training

    monkeypatch.setenv("VITVIZ_DATA_DIR", str(tmp_path / "data"))
    rng = np.random.default_rng(0)
    for c, name in enumerate(("dark", "light")):
        (tmp_path / "digits" / name).mkdir(parents=True)
        for i in range(3):
            pixels = rng.integers(0, 100, (20, 20), dtype=np.uint8) + 150 * c
            Image.fromarray(pixels, mode="L").save(tmp_path / "digits" / name / f"{i}.png")
    config = TrainConfig(
        dataset=f"folder:{tmp_path / 'digits'}",
        image_size=16,
        patch_size=8,
        dim=16,
        depth=1,
        heads=2,
        epochs=1,
        batch_size=4,
        out_dir=str(tmp_path / "run"),
        threads=1,
    )
    events: list = []
    result = run_training(config, events.append)
    assert result.status == "completed"
    probe = next(e for e in events if e.kind == "probe")
    assert probe.image.shape == (16, 16, 3) and is_gray(probe.image)

    loaded = load_checkpoint(tmp_path / "run" / "last.safetensors")
    assert loaded.config.in_channels == 1
    assert loaded.preprocessing.channels == 1 and len(loaded.preprocessing.mean) == 1
    assert loaded.provenance["dataset"]["channels"] == 1
    a = analyze(loaded, tmp_path / "digits" / "light" / "0.png")
    assert a.input.shape == (1, 16, 16) and a.attention.shape == (1, 2, 5, 5)
    assert torch.isfinite(a.logits).all()
    out = tmp_path / "explained"
    ckpt = str(tmp_path / "run" / "last.safetensors")
    photo = str(gray_photos["camera"])
    assert main(["explain", photo, "--checkpoint", ckpt, "--out", str(out)]) == 0
    with np.load(out / "camera.npz") as npz:
        assert npz["input"].shape == (1, 16, 16)


def test_shapes_trained_in_one_channel_evaluate(tmp_path: Path, monkeypatch) -> None:
    from vitviz.training import TrainConfig
    from vitviz.training.evaluate import evaluate_shapes_model
    from vitviz.training.loop import run_training

    monkeypatch.setenv("VITVIZ_DATA_DIR", str(tmp_path / "data"))
    config = TrainConfig(
        dataset="shapes",
        in_channels=1,
        image_size=16,
        patch_size=8,
        dim=16,
        depth=1,
        heads=2,
        epochs=1,
        batch_size=8,
        train_size=16,
        val_size=8,
        probe=False,
        out_dir=str(tmp_path / "run"),
        threads=1,
    )
    assert run_training(config).status == "completed"
    loaded = load_checkpoint(tmp_path / "run" / "last.safetensors")
    assert loaded.config.in_channels == 1 and loaded.preprocessing.channels == 1
    result = evaluate_shapes_model(loaded, n=8, seed=123)
    assert result.n == 8 and 0.0 <= result.accuracy <= 1.0 and np.isfinite(result.ratio)
