"""Memory planned before an analysis runs (DESIGN §7): what an estimate says (``MemoryEstimate``),
the memory free where an analysis would run, and the refusal raised when the first is larger
than the second (``NotEnoughMemoryError``). The estimate itself is made beside the analysis of
the kind that runs it, from its own measured factors.

The budget can be set with the environment variable ``VITVIZ_MEMORY_BUDGET`` (bytes, or a number
with K/M/G/T, e.g. "2G"); otherwise it is read from the machine (Linux ``MemAvailable`` and the
cgroup limit, ``core.host_memory``) or the CUDA device (``torch.cuda.mem_get_info`` plus
torch's cached free blocks).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from vitviz.core.errors import VitvizError
from vitviz.core.host_memory import BUDGET_ENV, host_available, parse_bytes

USABLE_FRACTION = 0.9  # of the free memory: the rest is left to the window and the system
_ALLOCATOR_SLACK = 1.25  # freed memory the allocator keeps (matters for many small layers)
_FIXED_OVERHEAD = 16 * 2**20  # bytes whatever the input: the allocator's arenas, torch's own
# buffers (a 1,025-token analysis peaked at 43-52 MiB in repeated runs for 50 MiB estimated)


class NotEnoughMemoryError(VitvizError):
    """An analysis that would not fit in the memory free where it would run; nothing was run."""

    def __init__(self, message: str, estimate: MemoryEstimate, available: int) -> None:
        super().__init__(message)
        self.estimate = estimate
        self.available = available


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes one analysis needs for an input of ``input_size`` giving ``tokens``.

    ``needed`` is the larger of the two peaks (the analysis's forward pass, then its maps
    computed from what it keeps), with the allocator's slack. ``weights`` are listed but not
    in ``needed``: a loaded model's weights are already in memory.
    """

    input_size: tuple[int, int]  # (H, W) of the model input
    tokens: int  # N = prefix tokens + patches
    layers: int  # the model's L
    heads: int
    attention: int  # one copy of every kept layer's attention: 4·K·H·N²
    forward_peak: int  # the forward pass, head statistics (and gradients) at their peak
    kept: int  # what the analysis keeps afterwards: attention (and its gradients), block outputs
    maps_peak: int  # beyond ``kept``: the N×N matrices of rollout, gradient rollout, relevance
    weights: int = 0  # the model's parameters
    layers_kept: int | None = None  # K, when fewer than the model's layers are kept
    block_outputs: int = 0  # of ``kept``: every block's output tokens, 4·L·N·D (DESIGN §5)

    @property
    def needed(self) -> int:
        """Bytes the analysis adds to what is already in memory."""
        return int(_ALLOCATOR_SLACK * self.peak) + _FIXED_OVERHEAD

    @property
    def peak(self) -> int:
        """The larger of the two peaks, without the allocator's slack and overhead."""
        return max(self.forward_peak, self.kept + self.maps_peak)


def available_memory(device: torch.device | str) -> int | None:
    """Bytes free for an analysis on ``device``; None when it can't be known (no refusal).

    ``VITVIZ_MEMORY_BUDGET`` wins over what the machine says (tests set it to a small budget).
    """
    budget = os.environ.get(BUDGET_ENV)
    if budget:
        return parse_bytes(budget)
    dev = torch.device(device)
    if dev.type == "cuda":
        free, _ = torch.cuda.mem_get_info(dev)
        cached = torch.cuda.memory_reserved(dev) - torch.cuda.memory_allocated(dev)
        return int(free + max(0, cached))
    if dev.type == "cpu":
        return host_available()
    return None  # MPS and others: unified memory the system manages; not planned


def format_bytes(n: float) -> str:
    """1536 -> '1.5 KB'; 21.6e9 -> '20.1 GB' (powers of 1024)."""
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1024 or unit == "PB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PB"  # pragma: no cover - the loop always returns
