"""vitviz-cli train end to end in a subprocess, then vitviz-cli explain (its ``main``, in this
process) on what it wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vitviz.checkpoints import load_checkpoint
from vitviz.training.shapes import SHAPE_NAMES, make_shapes

REPO = Path(__file__).resolve().parents[2]


def cli(*args: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "VITVIZ_DATA_DIR": str(data_dir),
    }
    return subprocess.run(
        [sys.executable, "-m", "vitviz.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
        check=False,
    )


def test_train_then_explain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    train = cli(
        "train", "--dataset", "shapes", "--train-size", "40", "--val-size", "20",
        "--epochs", "1", "--batch-size", "20", "--device", "cpu", "--threads", "1",
        "--out", str(out),
        data_dir=tmp_path / "data",
    )  # fmt: skip
    assert train.returncode == 0, train.stderr
    assert "training on cpu: 40 training / 20 validation images, 10 classes" in train.stderr
    assert "epoch 1/1: train loss" in train.stderr and "completed: 1 epochs" in train.stderr
    assert train.stdout == ""
    for name in ("config.json", "metrics.jsonl", "last.safetensors", "best.safetensors"):
        assert (out / name).is_file(), name
    assert not (tmp_path / "data").exists()  # --out given: nothing under the data directory

    config = json.loads((out / "config.json").read_text())
    assert config["dataset"] == "shapes" and config["dim"] == 64 and config["image_size"] == 32
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 1
    assert {"epoch", "train_loss", "val_loss", "val_acc", "images_per_s"} <= set(rows[0])

    best = load_checkpoint(out / "best.safetensors")
    assert best.class_names == list(SHAPE_NAMES)
    cfg = best.model.config
    assert (cfg.patch_size, cfg.dim, cfg.depth, cfg.heads, cfg.mlp_ratio) == (8, 64, 4, 4, 4.0)
    prep = best.preprocessing
    assert prep.resize == "squash" and prep.image_size == (32, 32)
    assert prep.mean != (0.5, 0.5, 0.5)  # the training data's own statistics
    assert best.provenance["command"].startswith("vitviz-cli train --dataset shapes")

    images, _, _ = make_shapes(1, 96, seed=42)
    photo = tmp_path / "shape.png"
    Image.fromarray(images[0].permute(1, 2, 0).numpy()).save(photo)
    # the explain in this process (the train's subprocess above is the end-to-end start-up)
    from vitviz.cli import main

    monkeypatch.setenv("VITVIZ_DATA_DIR", str(tmp_path / "data"))
    explained = main([
        "explain", str(photo), "--checkpoint", str(out / "best.safetensors"),
        "--device", "cpu", "--out", str(tmp_path / "explained"),
    ])  # fmt: skip
    assert explained == 0, capsys.readouterr().err
    with np.load(tmp_path / "explained" / "shape.npz", allow_pickle=False) as z:
        assert z["rollout"].shape == (4, 4)
        assert list(z["class_names"]) == list(SHAPE_NAMES)
