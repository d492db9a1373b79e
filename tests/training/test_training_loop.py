"""run_training as a plain function: no thread, no process; events, run folder, checkpoints."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from vitviz.checkpoints import load_checkpoint
from vitviz.training import (
    TrainConfig,
    list_runs,
    lr_at,
    read_metrics,
    read_run,
    runs_dir,
)
from vitviz.training.events import Event
from vitviz.training.loop import run_training
from vitviz.training.shapes import SHAPE_NAMES

# Small enough to run in about a second on two cores; no augmentation or regularisation, so the
# loss falls within a few dozen steps.
LEARN = TrainConfig(
    dataset="shapes",
    image_size=32,
    train_size=160,
    val_size=40,
    batch_size=32,
    epochs=8,
    lr=3e-3,
    warmup_epochs=0,
    drop_path_rate=0.0,
    label_smoothing=0.0,
    augment=False,
    fresh_each_epoch=False,
    step_report_interval_s=0.0,
    threads=1,  # quick on a busy machine too; run_training restores the thread count
)


@pytest.fixture(autouse=True)
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("VITVIZ_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def kinds(events: list[Event]) -> list[str]:
    return [e.kind for e in events]


def test_a_shapes_run_learns_and_records_everything(tmp_path: Path) -> None:
    events: list[Event] = []
    result = run_training(LEARN.replace(name="learn"), events.append)
    assert result.status == "completed" and result.epochs_done == 8
    # Run folder under the data directory, named <timestamp>-<name>.
    assert result.run_dir.parent == runs_dir()
    assert result.run_dir.name.endswith("-learn")

    losses = [e.loss for e in events if e.kind == "step"]
    assert len(losses) == 40  # one event per step with a zero report interval
    assert np.mean(losses[-10:]) < np.mean(losses[:10]) - 0.05

    # Event order: started, then per epoch: steps, epoch, checkpoint(s), probe; finished last.
    assert kinds(events)[0] == "started" and kinds(events)[-1] == "finished"
    assert kinds(events).count("epoch") == 8 and kinds(events).count("probe") == 8
    started = events[0]
    assert started.class_names == list(SHAPE_NAMES) and started.total_steps == 40
    probe = next(e for e in events if e.kind == "probe")
    assert probe.rollout.shape == (4, 4) and probe.rollout.dtype == np.float32
    assert probe.cls_attention.shape == (4, 4) and abs(probe.cls_attention.sum() - 1) < 0.5
    assert probe.image.shape == (32, 32, 3) and probe.mask.shape == (32, 32)
    epoch_events = [e for e in events if e.kind == "epoch"]
    assert [e.epoch for e in epoch_events] == list(range(1, 9))
    assert epoch_events[-1].eta_s == 0.0

    metrics = read_metrics(result.run_dir)
    assert len(metrics) == 8
    for key in ("epoch", "train_loss", "val_loss", "val_acc", "images_per_s"):
        assert all(key in row for row in metrics)
    assert metrics[-1]["train_loss"] < metrics[0]["train_loss"]

    config = json.loads((result.run_dir / "config.json").read_text())
    assert TrainConfig.from_dict(config) == LEARN.replace(name="learn", out_dir=str(result.run_dir))

    best_epoch = max(metrics, key=lambda m: m["val_acc"])["epoch"]  # the first of equals
    best = load_checkpoint(result.run_dir / "best.safetensors")
    last = load_checkpoint(result.run_dir / "last.safetensors")
    assert best.class_names == list(SHAPE_NAMES)
    assert best.provenance["epoch"] == best_epoch and last.provenance["epoch"] == 8
    assert best.provenance["dataset"]["train_seed"] == 0
    assert best.provenance["command"].startswith("vitviz-cli train --dataset shapes")
    assert best.provenance["train_config"]["lr"] == 3e-3
    assert best.preprocessing.resize == "squash" and best.preprocessing.image_size == (32, 32)
    assert best.model.config.drop_path_rate == 0.0 and best.model.config.num_classes == 10

    record = read_run(result.run_dir)
    assert record.status == "completed" and record.best_val_acc == result.best_val_acc
    assert [r.run_dir for r in list_runs()] == [result.run_dir]


def test_same_seed_same_run(tmp_path: Path) -> None:
    cfg = LEARN.replace(
        epochs=1,
        train_size=64,
        augment=True,
        fresh_each_epoch=True,
        drop_path_rate=0.1,
        probe=False,
    )
    runs = []
    for name in ("a", "b"):
        events: list[Event] = []
        run_training(cfg.replace(out_dir=str(tmp_path / name)), events.append)
        runs.append([e.loss for e in events if e.kind == "step"])
    assert runs[0] == runs[1]
    a = load_checkpoint(tmp_path / "a" / "last.safetensors").model.state_dict()
    b = load_checkpoint(tmp_path / "b" / "last.safetensors").model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_stop_flag_ends_the_run_mid_epoch_keeping_the_last_checkpoint(tmp_path: Path) -> None:
    events: list[Event] = []

    def stop() -> bool:  # a plain callable works as the stop flag too
        return sum(e.kind == "step" and e.epoch == 2 for e in events) >= 2

    result = run_training(
        LEARN.replace(out_dir=str(tmp_path / "run"), probe=False), events.append, stop
    )
    assert result.status == "cancelled" and result.epochs_done == 1
    finished = events[-1]
    assert finished.kind == "finished" and finished.status == "cancelled"
    assert "after 1 complete epoch" in finished.message
    last = [e for e in events if e.kind == "step"][-1]
    assert last.epoch == 2 and last.step == 7  # 5 steps per epoch, stopped in epoch 2
    assert load_checkpoint(tmp_path / "run" / "last.safetensors").provenance["epoch"] == 1
    assert read_run(tmp_path / "run").status == "cancelled"
    assert len(read_metrics(tmp_path / "run")) == 1


def test_data_error_is_reported_and_raised(tmp_path: Path) -> None:
    from vitviz.training.datasets import DatasetError

    root = tmp_path / "imgs"
    for name in ("a", "b"):
        (root / name).mkdir(parents=True)
        (root / name / "x.png").write_bytes(b"broken")
        (root / name / "y.png").write_bytes(b"broken")
    events: list[Event] = []
    with pytest.raises(DatasetError, match="no readable images"):
        run_training(
            TrainConfig(dataset=f"folder:{root}", out_dir=str(tmp_path / "run")), events.append
        )
    assert events[-1].kind == "finished" and events[-1].status == "failed"
    assert read_run(tmp_path / "run").status == "failed"


def test_read_metrics_skips_a_torn_last_line(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text('{"epoch": 1, "val_acc": 0.5}\n{"epoch": 2, "va')
    assert read_metrics(tmp_path) == [{"epoch": 1, "val_acc": 0.5}]
    assert read_metrics(tmp_path / "missing") == []


def test_schedule_warms_up_linearly_then_follows_a_cosine() -> None:
    lrs = [lr_at(s, 1.0, 110, warmup_steps=10, min_lr=0.1) for s in range(110)]
    assert lrs[:10] == pytest.approx([(s + 1) / 10 for s in range(10)])
    assert lrs[10] == pytest.approx(1.0) and lrs[-1] == pytest.approx(0.1)
    assert lrs[60] == pytest.approx(0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * 50 / 99)))
    assert all(a >= b for a, b in itertools.pairwise(lrs[10:]))
    assert lr_at(200, 1.0, 110, 10, 0.1) == pytest.approx(0.1)
    assert lr_at(0, 2.0, 1) == 2.0  # a one-step run takes the full rate
