"""The training set on the device: copied once, kept in host memory when it does not fit, and
the same run either way; the step's augmentation, and no host syncs between step reports."""

from __future__ import annotations

import collections
import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch
from tiny_runs import TWO_BY_TWO
from torch.utils._python_dispatch import TorchDispatchMode

from vitviz.training import TrainConfig
from vitviz.training import loop as loop_module
from vitviz.training.augment import CropFlip, crop_flip_draws, random_crop_flip
from vitviz.training.events import Event
from vitviz.training.loop import _Run, fits_on_device, run_training
from vitviz.training.runs import prepare_run_dir

CFG = dataclasses.replace(TWO_BY_TWO, fresh_each_epoch=False, compile="off")
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.fixture(autouse=True)
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("VITVIZ_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def _skip_without(device: str) -> None:
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")


def step_losses(cfg: TrainConfig, out: Path) -> tuple[list[float], list[str]]:
    events: list[Event] = []
    run_training(cfg.replace(out_dir=str(out)), events.append)
    return [e.loss for e in events if e.kind == "step"], [
        e.message for e in events if e.kind == "log"
    ]


@pytest.mark.parametrize("device", DEVICES)
def test_a_training_set_used_again_is_copied_to_the_device_once(
    tmp_path: Path, device: str
) -> None:
    _skip_without(device)
    cfg = CFG.replace(device=device, out_dir=str(tmp_path / "run"))
    run = _Run(cfg, prepare_run_dir(cfg), lambda e: None, None)
    run._setup()
    images, labels, on_device = run._train_tensors(1)
    assert on_device and images.device.type == device and labels.device.type == device
    again = run._train_tensors(2)
    assert again[0] is images and again[1] is labels  # no second copy
    assert torch.equal(images.cpu(), run.data.train_images)


@pytest.mark.parametrize("device", DEVICES)
def test_a_regenerated_training_set_replaces_the_last_copy(tmp_path: Path, device: str) -> None:
    _skip_without(device)
    cfg = CFG.replace(device=device, fresh_each_epoch=True, out_dir=str(tmp_path / "run"))
    run = _Run(cfg, prepare_run_dir(cfg), lambda e: None, None)
    run._setup()
    first, _, _ = run._train_tensors(1)
    second, _, on_device = run._train_tensors(2)
    assert on_device and not torch.equal(first, second)
    assert torch.equal(second.cpu(), run.data.train_set(2)[0])


def test_a_set_too_big_for_the_device_stays_in_host_memory_and_trains_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    resident, _ = step_losses(CFG.replace(device="cpu"), tmp_path / "a")
    monkeypatch.setattr(loop_module, "fits_on_device", lambda nbytes, device: False)
    on_host, logs = step_losses(CFG.replace(device="cpu"), tmp_path / "b")
    assert on_host == resident and len(on_host) == 4
    told = [m for m in logs if "stays in host memory" in m]
    assert len(told) == 1 and "(0 MiB)" in told[0]  # 48 tiny images, told once


def test_fits_on_device_takes_at_most_half_the_free_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    other = torch.device("meta")  # not the CPU: the memory budget decides
    monkeypatch.setenv("VITVIZ_MEMORY_BUDGET", "100M")
    assert fits_on_device(50 * 2**20, other) and not fits_on_device(50 * 2**20 + 1, other)
    assert fits_on_device(10 * 2**30, torch.device("cpu"))  # already there


def test_crop_flip_applies_exactly_the_drawn_offsets_and_flips() -> None:
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (24, 3, 6, 9), generator=g, dtype=torch.uint8)
    draws = crop_flip_draws(24, 2, True, torch.Generator().manual_seed(3))
    out = CropFlip(24, 3, 6, 9, 2, "cpu")(images, draws)
    oy, ox, flipped = draws
    assert flipped is not None and 0 < int(flipped.sum()) < 24
    padded = torch.nn.functional.pad(images, (2, 2, 2, 2))
    for i in range(24):
        crop = padded[i, :, int(oy[i]) : int(oy[i]) + 6, int(ox[i]) : int(ox[i]) + 9]
        assert torch.equal(out[i], crop.flip(-1) if bool(flipped[i]) else crop), i
    # random_crop_flip draws the same numbers in the same order
    same = random_crop_flip(images, 2, True, torch.Generator().manual_seed(3))
    assert torch.equal(same, out)


class _Syncs(TorchDispatchMode):
    """Counts the aten calls that read a device value on the host (item, float, int)."""

    def __init__(self) -> None:
        super().__init__()
        self.count: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.count[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def test_steps_between_reports_read_nothing_back_from_the_device(tmp_path: Path) -> None:
    """More steps in an epoch add no host reads when only the epoch's last step reports."""
    reads = []
    for steps in (2, 5):
        cfg = CFG.replace(train_size=32 * steps, epochs=1, step_report_interval_s=1e9, device="cpu")
        with _Syncs() as mode:
            step_losses(cfg, tmp_path / str(steps))
        assert mode.count["_fused_adamw_"] == 2 * steps  # the steps did run under the counter
        reads.append(mode.count["_local_scalar_dense"])
    assert reads[0] == reads[1]
