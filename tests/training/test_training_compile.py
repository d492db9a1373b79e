"""TrainConfig.compile: torch.compile of the training step, its fallback and checkpoint keys.

Inductor builds C++ on the CPU (minutes on two cores), so these tests inject cheap backends:
"aot_eager" (the same aten graph, forward and backward traced and run eagerly) and backends that
fail at the forward or at the backward compile.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open
from tiny_runs import TWO_BY_TWO

from vitviz.checkpoints import save_checkpoint
from vitviz.training import TrainConfig
from vitviz.training import compiled as compiled_module
from vitviz.training.compiled import CompiledOrEager, eager_module, wants_compile
from vitviz.training.events import Event
from vitviz.training.loop import run_training

# Two epochs of two steps (the second step a part batch), with every per-step feature on:
# augmentation, stochastic depth, label smoothing, clipping.
CFG = dataclasses.replace(TWO_BY_TWO, device="cpu")


@pytest.fixture(autouse=True)
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("VITVIZ_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def train(cfg: TrainConfig, out: Path) -> tuple[list[float], list[str], list[str]]:
    """Step losses, log messages and the last checkpoint's tensor names of a run."""
    events: list[Event] = []
    result = run_training(cfg.replace(out_dir=str(out)), events.append)
    assert result.status == "completed"
    with safe_open(str(out / "last.safetensors"), "pt") as f:
        keys = sorted(f.keys())
    losses = [e.loss for e in events if e.kind == "step"]
    return losses, [e.message for e in events if e.kind == "log"], keys


def test_compile_auto_is_for_cuda_only() -> None:
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert not wants_compile("auto", cpu) and wants_compile("auto", cuda)
    assert wants_compile("on", cpu) and wants_compile("on", cuda)
    assert not wants_compile("off", cpu) and not wants_compile("off", cuda)


def test_compiled_step_trains_like_eager_and_saves_plain_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compiled_module, "BACKEND", "eager")
    cfg = CFG.replace(train_size=32)  # one batch shape: one forward and one backward compile
    eager_losses, eager_logs, eager_keys = train(cfg.replace(compile="off"), tmp_path / "e")
    losses, logs, keys = train(cfg.replace(compile="on"), tmp_path / "c")
    assert any(m.startswith("training step compiled with torch.compile on cpu") for m in logs)
    assert not any("compile" in m for m in eager_logs)
    assert len(losses) == 2
    torch.testing.assert_close(losses, eager_losses, rtol=1e-5, atol=1e-6)
    assert keys == eager_keys and not any(k.startswith("_orig_mod") for k in keys)


def _fails_at_forward(gm: Any, example_inputs: Any) -> Any:
    raise RuntimeError("no C++ compiler here\n(details)")


def _fails_at_backward() -> Any:
    from torch._dynamo.backends.common import aot_autograd

    def forward(gm: Any, example_inputs: Any) -> Any:
        return gm.forward

    def backward(gm: Any, example_inputs: Any) -> Any:
        raise RuntimeError("backward kernel unsupported")

    return aot_autograd(fw_compiler=forward, bw_compiler=backward)


@pytest.mark.parametrize(
    "backend, reason",
    [
        (_fails_at_forward, "RuntimeError: no C++ compiler here"),
        (_fails_at_backward(), "RuntimeError: backward kernel unsupported"),
    ],
    ids=["forward", "backward"],
)
def test_a_failing_compile_falls_back_to_eager_with_a_log_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: Any, reason: str
) -> None:
    eager_losses, _, eager_keys = train(CFG.replace(compile="off"), tmp_path / "e")
    monkeypatch.setattr(compiled_module, "BACKEND", backend)
    losses, logs, keys = train(CFG.replace(compile="on"), tmp_path / "c")
    failed = [m for m in logs if m.startswith("torch.compile failed")]
    assert failed == [f"torch.compile failed ({reason}); training goes on without it"]
    # The failed step was done again from its start: the run is the eager run.
    assert losses == eager_losses and keys == eager_keys


def test_compile_that_cannot_even_start_is_reported_not_raised() -> None:
    notes: list[str] = []

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("Dynamo is not supported on this Python")

    original = torch.compile
    torch.compile = refuse  # type: ignore[assignment]
    try:
        step = CompiledOrEager(lambda v: v + 1, True, notes.append)
    finally:
        torch.compile = original
    assert not step.active and step.run(lambda f: f(1)) == 2
    assert notes == [
        "torch.compile failed (RuntimeError: Dynamo is not supported on this Python); "
        "training goes on without it"
    ]


def test_an_out_of_memory_step_is_not_blamed_on_the_compiler() -> None:
    """The step's own errors are raised as they are: compiling stays on, nothing is retried."""
    notes: list[str] = []
    calls: list[str] = []
    step = CompiledOrEager(lambda v: v + 1, True, notes.append, backend="eager")

    def body(f: Any) -> Any:
        calls.append("compiled" if f is step.compiled else "eager")
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    with pytest.raises(torch.OutOfMemoryError):
        step.run(body)
    assert calls == ["compiled"] and step.active and notes == []
    assert compiled_module.not_the_compiler(RuntimeError("CUDA error: device-side assert"))
    assert not compiled_module.not_the_compiler(RuntimeError("backward kernel unsupported"))


def test_a_compiled_module_saves_the_eager_keys(tmp_path: Path) -> None:
    from vitviz.blocks import create_model

    model = create_model("cifar10-tutorial")
    wrapped = torch.compile(model, backend="eager")
    assert all(k.startswith("_orig_mod.") for k in wrapped.state_dict())
    assert eager_module(wrapped) is model and eager_module(model) is model
    path = save_checkpoint(eager_module(wrapped), tmp_path / "m.safetensors")
    with safe_open(str(path), "pt") as f:
        assert sorted(f.keys()) == sorted(model.state_dict())
