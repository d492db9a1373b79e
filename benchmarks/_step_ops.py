"""Host work per training step, counted with torch.profiler over a window of steps.

A loop calls ``StepOps.after_step(i)`` after its i-th step (1-based); the profiler runs from
the end of step ``start`` to the end of step ``start + steps``, so set-up, compiling and the
end of the epoch (validation, checkpoints) fall outside the window. Counted per step:

- aten ops: operator calls made from Python or the autograd engine (those not inside another
  aten op), i.e. what the host dispatches one by one. Kernels a compiled graph runs are not
  aten calls; the extern calls it makes (matmuls, ...) are.
- device syncs (CUDA only): the host waiting for the GPU (stream, device or event
  synchronisation: ``.item()``, ``float(t)`` of a GPU tensor, ...).
- GPU work items (CUDA only): kernels, copies and memsets the device ran.

On the CPU there is no device to wait for (the CPU's fused AdamW reads its step counts with
``item()`` inside the kernel, which costs nothing), so only the aten ops are counted there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SYNC_CALLS = {
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
    "cuStreamSynchronize",
    "cuCtxSynchronize",
    "cuEventSynchronize",
}


@dataclass
class OpsCount:
    aten_ops: float
    syncs: float | None  # None: not on a CUDA device
    gpu_items: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"aten_ops": self.aten_ops, "syncs": self.syncs, "gpu": self.gpu_items}


def _top_level_aten(event: Any) -> bool:
    if not event.name.startswith("aten::"):
        return False
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::"):
            return False
        parent = parent.cpu_parent
    return True


class StepOps:
    """Profiles steps ``start + 1 .. start + steps`` of a loop; ``result`` once they are done."""

    def __init__(self, start: int, steps: int, cuda: bool) -> None:
        self.start, self.steps, self.cuda = start, steps, cuda
        self.profiler: Any = None
        self.result: OpsCount | None = None

    def after_step(self, i: int) -> None:
        from torch.profiler import ProfilerActivity, profile

        if i == self.start:
            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
            self.profiler = profile(activities=activities)
            self.profiler.start()
        elif i == self.start + self.steps and self.profiler is not None:
            self.profiler.stop()
            self.result = self._count(self.profiler.events())
            self.profiler = None

    def _count(self, events: Any) -> OpsCount:
        from torch.autograd import DeviceType

        cpu = [e for e in events if e.device_type == DeviceType.CPU]
        n = self.steps
        aten = sum(_top_level_aten(e) for e in cpu) / n
        if not self.cuda:
            return OpsCount(aten, None, None)
        syncs = sum(e.name in SYNC_CALLS for e in cpu) / n
        return OpsCount(aten, syncs, sum(e.device_type == DeviceType.CUDA for e in events) / n)
