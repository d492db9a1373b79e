"""A past run selected under Runs (after a restart: a new Training tab) shows what it showed
live: its per-step loss curve and its probe strip, one tile per epoch, from its run folder
(steps.jsonl, probes/)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vitviz.training import TrainConfig
from vitviz.training.events import ProbeEvent, StepEvent
from vitviz.training.loop import run_training
from vitviz.training.runs import read_probes, read_steps

SMALL = TrainConfig(
    dataset="shapes",
    image_size=32,
    train_size=96,
    val_size=32,
    batch_size=32,
    epochs=2,
    warmup_epochs=0,
    augment=False,
    fresh_each_epoch=False,
    step_report_interval_s=0.0,
    threads=1,
)


def test_a_past_run_keeps_its_probes_and_step_curve(
    qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VITVIZ_DATA_DIR", str(tmp_path / "data"))
    events: list = []
    result = run_training(SMALL.replace(name="past"), events.append)
    assert result.status == "completed"
    live_steps = [e for e in events if isinstance(e, StepEvent)]
    live_probes = [e for e in events if isinstance(e, ProbeEvent)]
    assert len(live_probes) == 2 and len(live_steps) >= 4
    # the folder keeps what the events said
    kept = read_probes(result.run_dir)
    assert [p["epoch"] for p in kept] == [e.epoch for e in live_probes]
    for p, e in zip(kept, live_probes, strict=True):
        np.testing.assert_array_equal(p["image"], e.image)
        np.testing.assert_array_equal(p["rollout"], e.rollout)
        assert (p["label"], p["predicted"]) == (e.label, e.predicted)
    assert [r["loss"] for r in read_steps(result.run_dir)] == pytest.approx(
        [e.loss for e in live_steps]
    )

    from vitviz.ui.training_tab import TrainingTab

    tab = TrainingTab()  # a new window's tab: nothing of the run in memory
    qtbot.addWidget(tab)
    tab.show()
    tab.refresh_runs()
    assert tab.runs.count() == 1
    tab.runs.setCurrentRow(0)
    assert len(tab.probe_labels) == 2
    x, y = tab.curve_step.getData()
    assert y is not None and len(y) == len(live_steps)
    np.testing.assert_allclose(y, [e.loss for e in live_steps], rtol=1e-6)
    assert x[-1] == pytest.approx(2.0)  # the last step ends epoch 2
