"""What an analysis of a ViT (or a token-layout model analysed as one) takes, planned before it
runs (DESIGN §7): ``vitviz.pipeline.memory``'s estimate for the model loaded (its config and
weights, how its forward pass hands the layers over) against the memory free where it runs, and
the refusal that names the other ways to run it.
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
    estimate_analysis,
    format_bytes,
)


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
