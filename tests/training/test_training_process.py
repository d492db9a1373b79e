"""Runs in real child processes: cancel at once, and kills that never break the last checkpoint.

Each child imports torch (seconds), so there are only three: one cancelled politely, one
terminated, one checkpoint writer killed with SIGKILL in the middle of a write.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from vitviz.checkpoints import load_checkpoint
from vitviz.training import RunHandle, TrainConfig, read_run, start_run
from vitviz.training.events import Event

REPO = Path(__file__).resolve().parents[2]

# Epochs of 100 small steps: long enough to cancel in the middle of the second one.
SLOW = TrainConfig(
    dataset="random",
    image_size=16,
    patch_size=8,
    dim=32,
    depth=2,
    heads=2,
    train_size=3200,
    val_size=32,
    batch_size=32,
    epochs=20,
    step_report_interval_s=0.0,
    threads=1,
)


@pytest.fixture(autouse=True)
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("VITVIZ_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def poll_until(
    handle: RunHandle,
    events: list[Event],
    done: Callable[[list[Event]], bool],
    timeout: float = 60.0,
) -> None:
    deadline = time.monotonic() + timeout
    while not done(events):
        assert time.monotonic() < deadline, f"timed out; events: {[e.kind for e in events]}"
        events += handle.poll()
        assert handle.finished is None or done(events), handle.finished
        time.sleep(0.02)


def in_second_epoch(events: list[Event]) -> bool:
    return any(e.kind == "step" and e.epoch == 2 and e.step >= 103 for e in events)


@pytest.mark.parametrize("grace_s", [5.0, 0.0], ids=["stops-itself", "terminated"])
def test_cancel_mid_epoch_leaves_the_last_checkpoint_loadable(
    grace_s: float, data_dir: Path
) -> None:
    handle = start_run(SLOW.replace(name=f"cancel-{grace_s:g}"))
    events: list[Event] = []
    try:
        poll_until(handle, events, in_second_epoch)
        t = time.monotonic()
        handle.cancel(grace_s=grace_s)
        assert not handle.is_alive()
        assert time.monotonic() - t < 3.0  # at once: the next step, or terminate
        poll_until(handle, events, lambda ev: ev[-1].kind == "finished", timeout=10)
    finally:
        if handle.is_alive():
            handle.cancel(grace_s=0)
    finished = events[-1]
    assert finished.status == "cancelled"
    assert handle.poll() == []  # nothing after the end
    assert handle.run_dir.parent == data_dir / "runs"
    ckpt = load_checkpoint(handle.run_dir / "last.safetensors")
    assert ckpt.provenance["epoch"] == 1
    assert [e.kind for e in events].count("epoch") == 1
    assert read_run(handle.run_dir).status == "cancelled"
    assert not list(handle.run_dir.glob(".*.tmp"))
    assert finished.epochs_done == 1 and "after 1 complete epoch" in finished.message


WRITER = """
import sys, torch
from vitviz.checkpoints import save_checkpoint
from vitviz.blocks import ViTConfig, VisionTransformer
torch.manual_seed(0)
model = VisionTransformer(ViTConfig(image_size=32, patch_size=8, num_classes=10, dim=384,
                                    depth=6, heads=6))  # about 43 MB of weights
for i in range(1, 1000):
    print(f"writing {i}", flush=True)
    save_checkpoint(model, sys.argv[1], provenance={"i": i})
    print(f"wrote {i}", flush=True)
"""


def test_sigkill_during_a_checkpoint_write_keeps_the_previous_one(tmp_path: Path) -> None:
    target = tmp_path / "last.safetensors"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(target)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )
    lines = []
    try:
        while True:  # two complete writes, then kill somewhere inside the third
            line = proc.stdout.readline().strip()
            assert line, f"writer ended early: {lines}"
            lines.append(line)
            if line == "writing 3":
                break
        time.sleep(random.uniform(0.0, 0.05))
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    loaded = load_checkpoint(target)
    assert loaded.provenance["i"] in (2, 3)
    assert loaded.model.config.dim == 384


class ListQueue(list):
    """Stands in for the multiprocessing queue in the child's own code."""

    def put(self, event: Event) -> None:
        self.append(event)


def test_child_reports_a_failure_with_its_traceback(tmp_path: Path) -> None:
    from vitviz.training.process import run_child

    events = ListQueue()
    code = run_child({"dataset": "random", "bogus": 1}, str(tmp_path), events, None)
    assert code == 1 and len(events) == 1
    end = events[0]
    assert end.kind == "finished" and end.status == "failed"
    assert "unknown training settings: bogus" in end.message
    assert "Traceback" in end.traceback

    broken = tmp_path / "broken"
    for name in ("a", "b"):
        (broken / name).mkdir(parents=True)
        (broken / name / "x.png").write_bytes(b"not an image")
        (broken / name / "y.png").write_bytes(b"not an image")
    events = ListQueue()
    cfg = TrainConfig(dataset=f"folder:{broken}", out_dir=str(tmp_path / "run"))
    (tmp_path / "run").mkdir()
    assert run_child(cfg.to_dict(), str(tmp_path / "run"), events, None) == 1
    assert [e.kind for e in events] == ["finished"]  # the loop's own report, not a second one
    assert "no readable images" in events[0].message and events[0].traceback == ""
