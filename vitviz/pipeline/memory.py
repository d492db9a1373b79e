"""Memory planned before an analysis runs (DESIGN §7): an estimate of what one analysis of an
input of a given size needs, the memory free where it would run, and a plain refusal when the
first is larger than the second (the check of a loaded model, and the refusal naming the other
ways to run it, stand beside the analysis of the kind that runs it).

The estimate is dominated by attention: N tokens, L layers, H heads give L·H·N² float32
probabilities, which an analysis without gradients holds once (each layer kept as it comes,
float16 / bfloat16 halve it) and one with gradients about two and a half times (the kept copy
and the attention the autograd graph saves; the gradients themselves are reduced layer by layer
to a few N×N products, ``GradientProducts``), plus per-layer temporaries of H·N², the N×N
matrices of the maps (rollout, gradient rollout, relevance) and the activations a gradient pass
saves. The factors below were fitted to peaks measured in fresh processes (1-12 layers, 1-4
heads, 785-9,217 tokens) and rounded up: the estimate came out 1.05-1.95× the measured peak
(``benchmarks/memory_estimate.py`` prints the comparison).

An analysis that keeps K of the L layers (``analyze(..., layers=...)``) counts the attention,
its gradients and the maps' matrices of those K layers only; the block outputs and the
activations a gradient pass saves still count every layer.

The budget can be set with the environment variable ``VITVIZ_MEMORY_BUDGET`` (bytes, or a number
with K/M/G/T, e.g. "2G"); otherwise it is read from the machine (Linux ``MemAvailable`` and the
cgroup limit) or the CUDA device (``torch.cuda.mem_get_info`` plus torch's cached free blocks).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from vitviz.core.errors import VitvizError

BUDGET_ENV = "VITVIZ_MEMORY_BUDGET"
USABLE_FRACTION = 0.9  # of the free memory: the rest is left to the window and the system
_F32 = 4

# Multiples of one layer's 4·H·N², of one 4·N² matrix and of the K kept layers' 4·K·N², fitted
# to the peaks benchmarks/memory_estimate.py measures (36 cases: 1-12 layers, 1-4 heads, 785-9,217
# tokens, every layer or 1-3 kept; estimate 1.05-1.95× the peak) and rounded up.
_CAPTURE_LAYER_TEMPORARIES = 1.5  # × 4·H·N²: a capture without gradients keeps its attention
# as each layer comes (the ViT kind's capture): one layer's scores and softmax beside the kept one
_GRAPH_ATTENTION = 1.5  # × 4·L·H·N²: the attention the autograd graph saves for the backward pass
_RECOMPUTED_BLOCK = 3.0  # × 4·H·N²: with fewer layers kept the backward pass recomputes each
# block instead (vitviz.kinds.vit.capture): one block's scores and attention
_BACKWARD_LAYER = 2.5  # × 4·H·N²: one layer's gradient G_l and A_l ⊙ G_l as the products form
_LAYER_TEMPORARIES = 1.0  # × 4·H·N²: scores before the softmax, the entropy's rows
_PAIR_TABLES = 2.0  # × 4·N²: the patch-distance table and its temporaries
_BLOCK_OUTPUTS = 2.0  # × 4·L·N·D: every block's output tokens and their norms
_GRADIENT_MAP_MATRICES = 1.0  # × 4·K·N²: gradient rollout's prepared matrices
_MAP_MATRICES = 3.0  # × 4·K·N²: prepared rollouts (kept), relevance's matrices
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
    kept: int  # what the analysis keeps afterwards: attention (and its gradients)
    maps_peak: int  # beyond ``kept``: the N×N matrices of rollout, gradient rollout, relevance
    weights: int = 0  # the model's parameters
    layers_kept: int | None = None  # K, when fewer than the model's layers are kept

    @property
    def needed(self) -> int:
        """Bytes the analysis adds to what is already in memory."""
        return int(_ALLOCATOR_SLACK * self.peak) + _FIXED_OVERHEAD

    @property
    def peak(self) -> int:
        """The larger of the two peaks, without the allocator's slack and overhead."""
        return max(self.forward_peak, self.kept + self.maps_peak)


def estimate_analysis(
    config: Any,
    input_size: tuple[int, int],
    *,
    gradients: bool = False,
    maps: bool = True,
    weights: int = 0,
    gradient_pass_only: bool = False,
    attention_bytes: int = _F32,
    batch: int = 1,
    layers: int | None = None,
) -> MemoryEstimate:
    """What analysing an input of ``input_size`` (H, W) with a model of ``config`` needs.

    ``config``: a ViTConfig or any object with depth, heads, dim, patch_size and
    num_prefix_tokens (hidden_dim and in_channels optional). ``gradients``: the forward pass
    also keeps the attention gradients. ``maps``: count the maps computed from it afterwards.
    ``gradient_pass_only``: a later gradient pass (and its maps) of an analysis in memory.
    ``attention_bytes``: bytes per kept attention entry (2 for float16 / bfloat16).
    ``batch``: images whose forward pass runs at once (every number but the weights scales).
    ``layers``: how many layers' attention (and gradients) are kept (None: every layer).
    """
    if batch > 1:
        one = estimate_analysis(
            config, input_size, gradients=gradients, maps=maps, weights=weights,
            gradient_pass_only=gradient_pass_only, attention_bytes=attention_bytes,
            layers=layers,
        )  # fmt: skip
        return MemoryEstimate(
            one.input_size, one.tokens, one.layers, one.heads, batch * one.attention,
            batch * one.forward_peak, batch * one.kept, one.maps_peak, weights, one.layers_kept,
        )  # fmt: skip
    h, w = (int(v) for v in input_size)
    p = max(1, int(config.patch_size))
    L, H, D = int(config.depth), int(config.heads), int(config.dim)
    K = L if layers is None else max(1, min(L, int(layers)))  # layers whose attention is kept
    partial = K if K < L else None
    hidden = int(getattr(config, "hidden_dim", 0) or 4 * D)
    C = int(getattr(config, "in_channels", 3) or 3)
    N = int(config.num_prefix_tokens) + (h // p) * (w // p)
    pair = _F32 * N * N  # one N×N float32 matrix
    A = K * H * pair  # the kept layers' attention
    block = _F32 * N * (4 * D + hidden)  # one block's activations
    layer = _LAYER_TEMPORARIES * H * pair + block  # one block's temporaries
    saved = L * _F32 * N * (8 * D + 2 * hidden)  # activations autograd keeps per block
    outputs = _BLOCK_OUTPUTS * L * _F32 * N * D
    inputs = 3 * _F32 * C * h * w  # the input tensor, its pixels, the resized image
    # GradientProducts: weighted and positive per kept layer, Grad-SAM's sum, the last G_L
    products = (2 * K + 1 + H) * pair
    graph = _RECOMPUTED_BLOCK * H * pair if partial else _GRAPH_ATTENTION * L * H * pair
    backward = graph + products + _BACKWARD_LAYER * H * pair + layer + saved + _PAIR_TABLES * pair
    gradient_maps = (_GRADIENT_MAP_MATRICES + _MAP_MATRICES) * K * pair
    if gradient_pass_only:  # the analysis (its attention) is already in memory
        return MemoryEstimate(
            (h, w), N, L, H, A, int(backward), products, int(gradient_maps), weights, partial
        )
    kept_attention = A * attention_bytes // _F32
    if gradients:
        forward = kept_attention + backward + outputs + inputs
        kept = kept_attention + products + inputs
        maps_peak = gradient_maps if maps else 0
    else:
        forward = kept_attention + _CAPTURE_LAYER_TEMPORARIES * H * pair + _PAIR_TABLES * pair
        forward += outputs + block + inputs
        kept = kept_attention + inputs
        maps_peak = _MAP_MATRICES * K * pair if maps else 0
    return MemoryEstimate(
        (h, w), N, L, H, A, int(forward), int(kept), int(maps_peak), weights, partial
    )


def parse_bytes(text: str) -> int:
    """'2G', '512M', '1.5g', '1000000' -> bytes (K/M/G/T are powers of 1024)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*", text, re.IGNORECASE)
    if m is None:
        raise ValueError(
            f"{BUDGET_ENV}={text!r} is not a size; use bytes or a number with K, M, G or T"
        )
    scale = 1024 ** " kmgt".index(m.group(2).lower() or " ")
    return int(float(m.group(1)) * scale)


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


def host_available() -> int | None:
    """Free RAM: Linux MemAvailable, capped by the cgroup's limit; sysconf elsewhere."""
    found = _meminfo_available()
    if found is None:
        try:
            found = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, ValueError, OSError):
            return None
    limit = _cgroup_room()
    return min(found, limit) if limit is not None else found


def _meminfo_available() -> int | None:
    try:
        text = Path("/proc/meminfo").read_text()
    except OSError:
        return None
    m = re.search(r"^MemAvailable:\s+(\d+)\s*kB", text, re.MULTILINE)
    return int(m.group(1)) * 1024 if m else None


def _cgroup_room() -> int | None:
    """limit − usage of this process's cgroup (v2, then v1), None when unlimited or unknown."""
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        (
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            "/sys/fs/cgroup/memory/memory.usage_in_bytes",
        ),
    ):
        try:
            limit_text = Path(limit_file).read_text().strip()
            usage = int(Path(usage_file).read_text().strip())
        except (OSError, ValueError):
            continue
        if not limit_text.isdigit() or int(limit_text) >= 2**60:
            return None  # "max" or the v1 "no limit" value
        return max(0, int(limit_text) - usage)
    return None


def format_bytes(n: float) -> str:
    """1536 -> '1.5 KB'; 21.6e9 -> '20.1 GB' (powers of 1024)."""
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1024 or unit == "PB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PB"  # pragma: no cover - the loop always returns
