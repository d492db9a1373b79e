"""Settings that can't work are refused with a clear message before anything starts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from vitviz.cli import main
from vitviz.training import (
    TrainConfig,
    TrainingConfigError,
    parse_dataset,
    preset_config,
    start_run,
    validate_training_config,
)
from vitviz.training.loop import run_training


@pytest.fixture(autouse=True)
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("VITVIZ_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def _one_class_folder(tmp_path: Path) -> str:
    (tmp_path / "one" / "cats").mkdir(parents=True)
    (tmp_path / "one" / "cats" / "a.png").write_bytes(b"")
    return f"folder:{tmp_path / 'one'}"


def _empty_folder(tmp_path: Path) -> str:
    (tmp_path / "empty").mkdir()
    return f"folder:{tmp_path / 'empty'}"


def _partial_cifar(tmp_path: Path) -> str:
    root = tmp_path / "cifar-10-batches-py"
    root.mkdir()
    (root / "data_batch_1").write_bytes(b"")
    return f"cifar10:{root}"


BAD = {
    "dim not divisible by heads": (dict(dim=30, heads=4), "dim 30 is not divisible by heads 4"),
    "image not divisible by patch": (
        dict(image_size=30, patch_size=8),
        "image size 30 is not divisible by patch size 8",
    ),
    "batch size 0": (dict(batch_size=0), "batch size must be at least 1 (got 0)"),
    "epochs 0": (dict(epochs=0), "epochs must be at least 1 (got 0)"),
    "lr 0": (dict(lr=0.0), "learning rate must be greater than 0"),
    "lr negative": (dict(lr=-1e-3), "learning rate must be greater than 0"),
    "lr nan": (dict(lr=float("nan")), "learning rate must be greater than 0"),
    "unknown dataset": (dict(dataset="imagenet"), "unknown dataset 'imagenet'"),
    "folder without path": (dict(dataset="folder:"), "dataset folder needs a path"),
    "missing folder": (dict(dataset="folder:/no/such/dir"), "does not exist"),
    "depth 0": (dict(depth=0), "depth must be at least 1"),
    "train size 0": (dict(train_size=0), "train size must be at least 1"),
    "unknown device": (dict(device="tpu"), "unknown device 'tpu'"),
    "unknown compile mode": (dict(compile="fast"), "compile must be one of auto, on, off"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_settings_are_named(case: str) -> None:
    overrides, message = BAD[case]
    problems = validate_training_config(TrainConfig(**overrides))
    assert any(message in p for p in problems), problems


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (_empty_folder, "needs at least two class sub-folders with images in them (found 0)"),
        (_one_class_folder, "(found 1: cats)"),
        (_partial_cifar, "missing data_batch_2, data_batch_3, data_batch_4, data_batch_5"),
    ],
)
def test_bad_data_folders_are_named(
    tmp_path: Path, make: Callable[[Path], str], message: str
) -> None:
    problems = validate_training_config(TrainConfig(dataset=make(tmp_path)))
    assert len(problems) == 1 and message in problems[0], problems


def test_every_problem_is_listed_at_once() -> None:
    problems = validate_training_config(TrainConfig(dim=30, heads=4, epochs=0, lr=0))
    assert len(problems) == 3


def test_good_settings_pass() -> None:
    assert validate_training_config(TrainConfig()) == []
    assert validate_training_config(preset_config("shapes")) == []
    assert validate_training_config(TrainConfig(dataset="random", device="cpu")) == []


def test_an_output_folder_holding_a_run_is_refused(tmp_path: Path) -> None:
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "metrics.jsonl").write_text("")
    problems = validate_training_config(TrainConfig(out_dir=str(tmp_path / "old")))
    assert problems == [
        f"output folder {tmp_path / 'old'} already holds a run (metrics.jsonl); choose another"
    ]


def test_refused_before_anything_is_created(tmp_path: Path, data_dir: Path) -> None:
    bad = TrainConfig(dim=30, heads=4)
    with pytest.raises(TrainingConfigError, match="dim 30 is not divisible by heads 4") as info:
        start_run(bad)
    assert info.value.problems == ["dim 30 is not divisible by heads 4"]
    with pytest.raises(TrainingConfigError):
        run_training(bad.replace(out_dir=str(tmp_path / "out")))
    assert not data_dir.exists()
    assert not (tmp_path / "out").exists()


def test_cli_refuses_bad_settings_with_exit_2(
    tmp_path: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    code = main(["train", "--dim", "30", "--heads", "4", "--epochs", "0", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    assert "vitviz-cli: can't train: dim 30 is not divisible by heads 4" in err
    assert "vitviz-cli: can't train: epochs must be at least 1 (got 0)" in err
    assert main(["train", "--dataset", f"cifar10:{tmp_path}", "--out", str(out)]) == 2
    assert "is not a CIFAR-10 python batches folder" in capsys.readouterr().err
    assert not out.exists() and not data_dir.exists()


def test_dataset_spec_parsing() -> None:
    assert parse_dataset("shapes").kind == "shapes"
    spec = parse_dataset("folder:/data/my pets")
    assert (spec.kind, spec.path, str(spec)) == ("folder", "/data/my pets", "folder:/data/my pets")
    assert parse_dataset("CIFAR10:C:/x").path == "C:/x"  # a Windows path keeps its colon
    with pytest.raises(ValueError, match="takes no path"):
        parse_dataset("shapes:/x")


def test_config_round_trips_through_a_dict() -> None:
    cfg = preset_config("shapes", seed=3)
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="unknown training settings: bogus"):
        TrainConfig.from_dict({"bogus": 1})


def test_equivalent_command_rebuilds_the_config() -> None:
    import shlex

    from vitviz.cli import build_parser
    from vitviz.training.command import config_from_args
    from vitviz.training.config import equivalent_command

    configs = [
        preset_config("shapes", out_dir="/runs/a b", seed=4),
        TrainConfig(dataset="random", dim=32, heads=2, epochs=3, augment=False),
        TrainConfig(dataset="folder:/data/my pets", lr=5e-4, device="cpu", name="pets"),
        TrainConfig(dataset="random", compile="on"),
        TrainConfig(dataset="random", compile="off", device="cpu"),
    ]
    for cfg in configs:
        argv = shlex.split(equivalent_command(cfg))
        assert argv[:2] == ["vitviz-cli", "train"]
        rebuilt = config_from_args(build_parser().parse_args(argv[1:]))
        assert rebuilt.replace(step_report_interval_s=cfg.step_report_interval_s) == cfg
    assert "--compile" not in equivalent_command(TrainConfig())  # auto: the default


def test_cli_compile_flag() -> None:
    from vitviz.cli import build_parser
    from vitviz.training.command import config_from_args

    def compile_mode(*flags: str) -> str:
        return config_from_args(build_parser().parse_args(["train", *flags])).compile

    assert compile_mode() == "auto"
    assert compile_mode("--compile") == "on"  # alone: on, the CPU too
    assert compile_mode("--compile", "off") == "off"
    assert compile_mode("--compile", "auto", "--epochs", "2") == "auto"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--compile", "fast"])
