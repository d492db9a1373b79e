"""What an analysis of a ViT (or of a token-layout model analysed as one) takes, planned before
it runs (DESIGN §7): the estimate for an input of a given size, the check of a loaded model
against the memory free where it runs (``vitviz.pipeline.memory``), and the refusal that names
the other ways to run it.

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
activations a gradient pass saves still count every layer. Every analysis keeps every block's
output tokens, 4·L·N·D (the feature views read them, DESIGN §5): they count in what it keeps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from vitviz.pipeline import memory
from vitviz.pipeline.memory import (
    USABLE_FRACTION,
    MemoryEstimate,
    NotEnoughMemoryError,
    format_bytes,
)

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
            block_outputs=batch * one.block_outputs,
        )  # fmt: skip
    h, w = (int(v) for v in input_size)
    p = max(1, int(config.patch_size))
    L, H, D = int(config.depth), int(getattr(config, "layer_heads", config.heads)), int(config.dim)
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
    kept_outputs = L * _F32 * N * D  # every block's output, kept for the feature views
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
        kept = kept_attention + products + inputs + kept_outputs
        maps_peak = gradient_maps if maps else 0
    else:
        forward = kept_attention + _CAPTURE_LAYER_TEMPORARIES * H * pair + _PAIR_TABLES * pair
        forward += outputs + block + inputs
        kept = kept_attention + inputs + kept_outputs
        maps_peak = _MAP_MATRICES * K * pair if maps else 0
    return MemoryEstimate(
        (h, w), N, L, H, A, int(forward), int(kept), int(maps_peak), weights, partial,
        block_outputs=kept_outputs,
    )  # fmt: skip


def estimate_for_model(
    model: Any,
    input_size: tuple[int, int],
    *,
    gradients: bool = False,
    gradient_pass_only: bool = False,
    attention_dtype: torch.dtype = torch.float32,
    batch: int = 1,
    layers: int | None = None,
    params: list[torch.Tensor] | None = None,
) -> MemoryEstimate:
    """``estimate_analysis`` for a loaded ``model`` (its config and weights); model code keeps
    the forward peak of every layer whatever ``layers`` says (its forward pass lists every
    layer's attention before vitviz keeps some). ``params``: the model's parameters, listed
    already (else listed here)."""
    params = list(model.parameters()) if params is None else params
    weights = sum(t.numel() * t.element_size() for t in params)

    def keeping(kept: int | None) -> MemoryEstimate:
        return estimate_analysis(
            model.config,
            input_size,
            gradients=gradients,
            weights=weights,
            gradient_pass_only=gradient_pass_only,
            attention_bytes=torch.empty(0, dtype=attention_dtype).element_size(),
            batch=batch,
            layers=kept,
        )

    est = keeping(layers)
    if layers is not None and not _hands_over_layers(model):
        est = replace(est, forward_peak=max(est.forward_peak, keeping(None).forward_peak))
    return est


def check_analysis_memory(
    model: Any,
    input_size: tuple[int, int],
    device: torch.device | str | None = None,
    *,
    gradients: bool = False,
    gradient_pass_only: bool = False,
    attention_dtype: torch.dtype = torch.float32,
    batch: int = 1,
    layers: int | None = None,
) -> MemoryEstimate:
    """Raise NotEnoughMemoryError when analysing an ``input_size`` (H, W) input with ``model``
    (``batch`` images at once, keeping ``layers`` layers' attention; None: every layer) would
    not fit where it runs: the analysis stays on that device; returns the estimate otherwise.
    ``device`` defaults to where the model's parameters are."""
    params = list(model.parameters())
    dev = torch.device(device) if device is not None else _device_of(params)

    kinds = dict(gradients=gradients, gradient_pass_only=gradient_pass_only, batch=batch)

    def estimate(kept: int | None) -> MemoryEstimate:
        return estimate_for_model(
            model, input_size, attention_dtype=attention_dtype, layers=kept, params=params, **kinds
        )

    est = estimate(layers)
    free = memory.available_memory(dev)  # read through the module: a budget patched there counts
    if free is not None and est.needed > USABLE_FRACTION * free:
        trained = getattr(model.config, "image_size", None)
        message = _refusal(est, est.needed, free, dev, trained, gradient_pass_only)
        # a later gradient pass serves an analysis that exists: fewer layers means analysing
        # again, which the refusal of that pass does not offer
        fit = (
            0
            if gradient_pass_only
            else layers_that_fit(estimate, est.layers_kept or est.layers, free)
        )
        message += _choices(dev, attention_dtype, batch, fit, est.layers)
        raise NotEnoughMemoryError(message, est, free)
    return est


def layers_that_fit(estimate: Callable[[int], MemoryEstimate], fewer_than: int, free: int) -> int:
    """The most layers, below ``fewer_than``, whose analysis (``estimate(k)``) fits in ``free``
    bytes; 0 when not even one does."""
    lo, hi = 0, fewer_than - 1  # the answer is in lo..hi; the estimate grows with k
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if estimate(mid).needed <= USABLE_FRACTION * free:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _choices(
    dev: torch.device, attention_dtype: torch.dtype, batch: int, fit: int, depth: int
) -> str:
    """The other ways to run it, named in the refusal (``fit``: layers whose analysis fits)."""
    out = []
    if batch > 1:
        out.append("fewer images at once (--batch-size)")
    if attention_dtype == torch.float32:
        out.append(
            "attention kept in half precision (--attention-dtype float16, or "
            "analyze(..., attention_dtype=torch.float16))"
        )
    if fit > 0:
        out.append(
            f"fewer layers kept: {fit} of the {depth} layers fit (--layers last:{fit}, or "
            f'analyze(..., layers="last:{fit}"); rollout and relevance need every layer)'
        )
    if dev.type != "cpu":
        out.append("the CPU (--device cpu)")
    return " Other choices: " + "; ".join(out) + "." if out else ""


def _hands_over_layers(model: Any) -> bool:
    """Whether the model's forward pass hands each layer's attention over as it comes
    (vitviz's own ViT), so layers not kept are never held; model code lists them all."""
    from vitviz.blocks import VisionTransformer

    return isinstance(model, VisionTransformer)


def _device_of(params: list[torch.Tensor]) -> torch.device:
    return params[0].device if params else torch.device("cpu")


def _refusal(
    est: MemoryEstimate,
    needed: int,
    free: int,
    device: torch.device,
    trained: Any,
    gradient_pass: bool,
) -> str:
    h, w = est.input_size
    where = "on this machine" if device.type == "cpu" else f"on {device}"
    what = "its gradient pass" if gradient_pass else "analysing it"
    at = f" (the model was trained at {trained[0]}×{trained[1]})" if trained else ""
    layers = f"{est.layers} layers"
    if est.layers_kept is not None:
        layers = f"{est.layers_kept} of {est.layers} layers kept"
    return (
        f"input size {h}×{w} gives {est.tokens:,} tokens over {layers} × "
        f"{est.heads} heads: {what} needs about {format_bytes(needed)} of memory, but "
        f"{format_bytes(free)} is free {where}; choose a smaller image size{at}: memory "
        f"grows with the fourth power of the side."
    )
