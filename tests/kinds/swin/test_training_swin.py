"""Training a Swin: the preset, its checks, a tiny run through the CLI and the probe per epoch."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import pytest
import torch

from vitviz.checkpoints import load_checkpoint
from vitviz.kinds.swin.analysis import analyze_swin
from vitviz.kinds.swin.network import SwinTransformer
from vitviz.kinds.swin.training import SWIN_PRESET
from vitviz.training import loop
from vitviz.training.config import (
    TrainConfig,
    equivalent_command,
    preset_config,
)
from vitviz.training.validate import TrainingConfigError, validate_training_config

# A tiny Swin: 16 px, patch 2, window 4 on 8² and 4² grids, widths 12-24.
TINY = (
    "--preset", "swin", "--image-size", "16", "--swin-dims", "12,24", "--swin-depths", "2,2",
    "--swin-heads", "2,4", "--dataset", "shapes", "--train-size", "20", "--val-size", "10",
    "--batch-size", "10", "--device", "cpu", "--threads", "1",
)  # fmt: skip


def _spy_models(monkeypatch: pytest.MonkeyPatch) -> list[torch.nn.Module]:
    """Every model a run builds (so a test can hold the trained one)."""
    built: list[torch.nn.Module] = []
    real = loop.build_model

    def spy(*args, **kwargs):
        built.append(real(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(loop, "build_model", spy)
    return built


def test_cli_trains_a_tiny_swin_into_a_native_checkpoint(tmp_path, monkeypatch, capsys):
    from vitviz.cli import main

    built = _spy_models(monkeypatch)
    out = tmp_path / "run"
    assert main(["train", *TINY, "--epochs", "1", "--out", str(out)]) == 0
    assert "epoch 1/1" in capsys.readouterr().err
    config = json.loads((out / "config.json").read_text())
    assert config["model"] == "swin" and config["swin_dims"] == [12, 24]
    loaded = load_checkpoint(out / "last.safetensors")
    assert isinstance(loaded.model, SwinTransformer)
    assert loaded.model.config.dims == (12, 24) and loaded.model.config.window_sizes == (4, 4)
    assert len(built) == 1
    trained = built[0].eval()
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want, got = trained(x), loaded.model(x)
    assert want.shape == (2, 10)
    assert (got - want).abs().max() < 1e-5
    with torch.no_grad():  # the saved model is the trained one, not a fresh initialisation
        fresh = SwinTransformer(loaded.model.config)
        assert (fresh(x) - want).abs().max() > 1e-3


def test_probe_is_the_windowed_rollout_of_each_epoch(tmp_path, monkeypatch):
    built = _spy_models(monkeypatch)
    cfg = preset_config(
        "swin", image_size=16, swin_dims=(12, 24), swin_depths=(2, 2), swin_heads=(2, 4),
        train_size=20, val_size=10, batch_size=10, epochs=2, device="cpu", threads=1,
        out_dir=str(tmp_path / "run"),
    )  # fmt: skip
    events = []
    result = loop.run_training(cfg, events.append)
    assert result.status == "completed"
    probes = [e for e in events if e.kind == "probe"]
    assert [p.epoch for p in probes] == [1, 2]
    for p in probes:
        assert p.rollout.shape == (8, 8) and p.rollout.dtype == np.float32
        assert np.isfinite(p.rollout).all() and abs(float(p.rollout.max()) - 1.0) < 1e-6
        assert p.cls_attention.shape == (4, 4)
        assert abs(float(p.cls_attention.sum()) - 1.0) < 1e-4
    assert not np.allclose(probes[0].rollout, probes[1].rollout)  # it changes as it trains
    # the last probe is the trained model's windowed rollout of the first validation image
    loaded = load_checkpoint(tmp_path / "run" / "last.safetensors")
    image = torch.from_numpy(probes[-1].image).permute(2, 0, 1).float() / 255
    mean = torch.tensor(loaded.preprocessing.mean)[:, None, None]
    std = torch.tensor(loaded.preprocessing.std)[:, None, None]
    want = analyze_swin(built[0].eval(), (image - mean) / std).rollout()
    assert np.abs(probes[-1].rollout - want.numpy()).max() < 1e-4


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (dict(swin_dims=(12, 25)), "stage 1: width 25 is not divisible by 4 heads"),
        (dict(image_size=24), "image size 24 is not divisible by patch 2 · 2^1 · window 4 = 16"),
        (dict(swin_heads=(2,)), "one entry per stage (got 2, 2 and 1)"),
        (dict(swin_depths=(2, 0)), "swin_depths must all be at least 1"),
        (dict(window_size=0), "window_size must be at least 1"),
        (dict(model="convnet"), "model must be one of vit, swin"),
    ],
)
def test_bad_swin_configs_are_refused_before_starting(tmp_path, changes, message):
    cfg = preset_config(
        "swin", image_size=16, swin_dims=(12, 24), swin_depths=(2, 2), swin_heads=(2, 4),
        device="cpu", out_dir=str(tmp_path / "run"),
    )  # fmt: skip
    assert validate_training_config(cfg) == []
    bad = cfg.replace(**changes)
    problems = validate_training_config(bad)
    assert any(message in p for p in problems), problems
    with pytest.raises(TrainingConfigError) as info:
        loop.run_training(bad)
    assert "\n" not in str(info.value) and message in str(info.value)
    assert not (tmp_path / "run").exists()  # refused before anything was made


def test_cli_refuses_a_bad_swin_in_one_line(tmp_path, capsys):
    from vitviz.cli import main

    code = main(["train", *TINY, "--swin-heads", "5,4", "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err == ["vitviz-cli: can't train: stage 0: width 12 is not divisible by 5 heads"]
    assert not (tmp_path / "r").exists()


def test_preset_and_equivalent_command_round_trip():
    from vitviz.cli import build_parser
    from vitviz.training.command import config_from_args

    assert TrainConfig(**SWIN_PRESET).model == "swin"
    assert validate_training_config(preset_config("swin", device="cpu")) == []
    cfg = preset_config("swin", swin_dims=(24, 48, 96), window_size=2, epochs=3)
    command = equivalent_command(cfg)
    assert "--preset swin" in command and "--swin-dims 24,48,96" in command
    args = build_parser().parse_args(shlex.split(command)[1:])
    again = config_from_args(args)
    assert again.replace(step_report_interval_s=cfg.step_report_interval_s) == cfg
    assert "--model" not in equivalent_command(preset_config("shapes"))  # ViTs unchanged
    assert TrainConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg


def test_model_swin_alone_starts_from_the_swin_preset():
    """`vitviz-cli train --model swin` (checkpoints.md) trains the small Swin: without --preset
    the kind's own preset, not the ViT's patch 8 (refused: 32 px not divisible by 128); a ViT
    still starts from the tutorial, and an explicit --preset wins."""
    from vitviz.cli import build_parser
    from vitviz.training.command import config_from_args

    def config(*flags: str) -> TrainConfig:
        return config_from_args(build_parser().parse_args(["train", *flags]))

    swin = config("--model", "swin", "--device", "cpu")
    assert swin.replace(step_report_interval_s=0) == preset_config(
        "swin", dataset="shapes", device="cpu", step_report_interval_s=0
    )
    assert validate_training_config(swin) == []
    assert config().replace(step_report_interval_s=0) == preset_config(
        "tutorial", dataset="shapes", step_report_interval_s=0
    )
    assert config("--model", "swin", "--preset", "tutorial").patch_size == 8


def test_swin_preset_in_the_training_tab(qtbot, tmp_path: Path):
    from vitviz.ui.training_tab import TrainingTab

    tab = TrainingTab()
    qtbot.addWidget(tab)
    assert tab.preset.findData("swin") >= 0
    tab.apply_preset("swin")
    cfg = tab.config()
    assert cfg.model == "swin" and cfg.swin_dims == (48, 96, 192) and cfg.window_size == 4
    assert tab.window_size.isEnabled() and not tab.dim.isEnabled()
    tab.swin_heads.setText("3,6,11")
    tab.device.setCurrentText("cpu")
    assert not tab.start()  # refused before anything starts
    assert "width 192 is not divisible by 11 heads" in tab.problems.text()
    tab.swin_heads.setText("3,six,12")
    assert not tab.start()
    assert "Heads (Swin)" in tab.problems.text()
    tab.apply_preset("tutorial")
    assert tab.dim.isEnabled() and not tab.window_size.isEnabled()
    assert tab.config().model == "vit"


def test_swin_on_a_grayscale_image_folder(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(0)
    for name in ("dark", "light"):
        (tmp_path / "data" / name).mkdir(parents=True)
        for i in range(5):
            pixels = rng.integers(0, 256, (20, 20), dtype=np.uint8)
            Image.fromarray(pixels).convert("L").save(tmp_path / "data" / name / f"{i}.png")
    cfg = preset_config(
        "swin", dataset=f"folder:{tmp_path / 'data'}", image_size=16, swin_dims=(12, 24),
        swin_depths=(2, 2), swin_heads=(2, 4), epochs=1, batch_size=4, val_fraction=0.4,
        device="cpu", threads=1, out_dir=str(tmp_path / "run"),
    )  # fmt: skip
    events = []
    assert loop.run_training(cfg, events.append).status == "completed"
    loaded = load_checkpoint(tmp_path / "run" / "best.safetensors")
    assert isinstance(loaded.model, SwinTransformer) and loaded.model.config.in_channels == 1
    assert loaded.class_names == ["dark", "light"]
    assert [e.rollout.shape for e in events if e.kind == "probe"] == [(8, 8)]


def test_shapes_evaluation_of_a_swin_is_its_windowed_rollout_mass(tmp_path):
    from vitviz.training.evaluate import evaluate_shapes_model, patch_coverage
    from vitviz.training.shapes import make_shapes

    cfg = preset_config(
        "swin", image_size=16, swin_dims=(12, 24), swin_depths=(2, 2), swin_heads=(2, 4),
        train_size=20, val_size=10, batch_size=10, epochs=1, device="cpu", threads=1,
        out_dir=str(tmp_path / "run"),
    )  # fmt: skip
    loop.run_training(cfg)
    loaded = load_checkpoint(tmp_path / "run" / "last.safetensors")
    result = evaluate_shapes_model(loaded, n=6, seed=123, batch_size=4)
    images, _, masks = make_shapes(6, 16, 123)
    mean = torch.tensor(loaded.preprocessing.mean)[:, None, None]
    std = torch.tensor(loaded.preprocessing.std)[:, None, None]
    masses = []
    for image, mask in zip(images, masks, strict=True):
        r = analyze_swin(loaded.model, (image.float() / 255 - mean) / std).rollout()
        cover = patch_coverage(mask[None], (8, 8))[0]
        masses.append(float((r / r.sum() * cover).sum()))
    assert abs(result.rollout_mass_in_mask - sum(masses) / len(masses)) < 1e-5
    assert 0 <= result.accuracy <= 1


def test_swin_on_cifar10_batches(tmp_path):
    from test_training_data import write_cifar

    write_cifar(tmp_path / "cifar-10-batches-py", per_batch=4)
    cfg = preset_config(
        "swin", dataset=f"cifar10:{tmp_path / 'cifar-10-batches-py'}", patch_size=4,
        swin_dims=(12, 24), swin_depths=(2, 2), swin_heads=(2, 4), epochs=1, batch_size=10,
        device="cpu", threads=1, out_dir=str(tmp_path / "run"),
    )  # fmt: skip
    events = []
    assert loop.run_training(cfg, events.append).status == "completed"
    loaded = load_checkpoint(tmp_path / "run" / "last.safetensors")
    assert isinstance(loaded.model, SwinTransformer) and len(loaded.class_names) == 10
    assert loaded.model.config.image_size == (32, 32) and loaded.model.config.patch_size == 4
    assert [e.rollout.shape for e in events if e.kind == "probe"] == [(8, 8)]
