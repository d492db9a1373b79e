"""A device that isn't there is a VitvizError in one line (python-api.md: the one-line errors),
with advice for the command line and for Python alike."""

from __future__ import annotations

import pytest
import torch

import vitviz
from vitviz.core.devices import resolve_device


def test_cuda_without_a_gpu_is_a_vitviz_error_saying_how_to_use_the_cpu(
    monkeypatch: pytest.MonkeyPatch, tiny_ckpt
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(vitviz.VitvizError) as info:
        vitviz.analyze(vitviz.load_checkpoint(tiny_ckpt), b"unused", device="cuda")
    msg = str(info.value)
    assert "no CUDA GPU" in msg and "--device cpu" in msg and 'device="cpu"' in msg, msg
    assert "\n" not in msg


@pytest.mark.parametrize("choice", ["tpu", "vulkan"])
def test_an_unknown_device_is_a_vitviz_error(choice: str) -> None:
    with pytest.raises(vitviz.VitvizError, match="use one of auto, cpu, cuda, mps"):
        resolve_device(choice)
