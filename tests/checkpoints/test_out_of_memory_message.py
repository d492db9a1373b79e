"""Running out of memory while a checkpoint is loaded and checked is said in one line with the
size torch could not allocate (found by benchmarks/fuzz.py: a Sapiens2 folder without its
model_args runs the library check at its name's 1024×768, whose eager attention needs 2.4 GB;
torch's allocator error came back as the loader's catch-all, "could not convert these
weights")."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import vitviz.checkpoints.load as load
from vitviz.checkpoints import CheckpointError, load_checkpoint

ALLOCATOR = (
    "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: "
    "you tried to allocate 2419459344 bytes. Error code 12 (Cannot allocate memory)"
)


@pytest.mark.parametrize(
    "error", [RuntimeError(ALLOCATOR), torch.OutOfMemoryError("CUDA out of memory.")]
)
def test_an_allocation_that_fails_while_checking_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    pytest.importorskip("timm")
    from pit_helpers import save_folder, tiny_timm_pit

    folder = save_folder(tiny_timm_pit(seed=1), tmp_path / "pit")

    def short_of_memory(*_: object, **__: object) -> None:
        raise error

    monkeypatch.setattr(load, "check_or_refuse", short_of_memory)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(folder)
    text = str(info.value)
    assert "\n" not in text and "could not convert" not in text, text
    assert text.startswith("pit: not enough memory to load and check these weights"), text
    said = "could not allocate 2.3 GB" in text
    assert said == (not isinstance(error, torch.OutOfMemoryError)), text
