"""Many images through one ViT (or token-layout) model: forward passes in batches on the
device (DESIGN §7).

``iter_analyses`` decodes the images one at a time, groups consecutive inputs of one shape
into batches of ``batch_size`` (default: as many as memory allows, ``choose_batch_size``),
runs each batch's forward pass at once and yields one Analysis per image, in order, equal to
what ``analyze`` gives that image alone (batched matmuls differ from single ones only by
float rounding). An image that can't be read, holds non-finite numbers or would not fit is
yielded with its error; the others go on.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from vitviz.checkpoints import LoadedModel
from vitviz.core.errors import VitvizError
from vitviz.core.layers import LayerSpec, parse_layers
from vitviz.imaging import Preprocessing
from vitviz.imaging.reduction import OVERLAY_MAX_SIDE
from vitviz.kinds.vit.analysis import (
    Analysis,
    _analysis,
    _Input,
    _prepare,
    _setup,
)
from vitviz.kinds.vit.capture import capture_batch
from vitviz.kinds.vit.memory import check_analysis_memory, estimate_for_model
from vitviz.pipeline.batch import BatchItem
from vitviz.pipeline.memory import USABLE_FRACTION, NotEnoughMemoryError, available_memory

MAX_BATCH = 32  # the default batch size's ceiling: larger batches gain nothing measurable
UNKNOWN_MEMORY_BATCH = 8  # default where free memory can't be known (MPS)
RESULTS_IN_FLIGHT = 2.0  # batches' worth of analyses alive besides the running one (writers)


def choose_batch_size(
    model: Any,
    input_size: tuple[int, int],
    *,
    gradients: bool = False,
    attention_dtype: torch.dtype = torch.float32,
    limit: int = MAX_BATCH,
    layers: int | None = None,
) -> int:
    """The most images whose forward pass fits the free memory of the model's device at once,
    leaving room for the analyses still being written (``RESULTS_IN_FLIGHT`` batches), 1..limit.
    ``layers``: how many layers each analysis keeps (None: every layer)."""
    dev = next(model.parameters()).device
    free = available_memory(dev)
    if free is None:
        return max(1, min(limit, UNKNOWN_MEMORY_BATCH))
    one = estimate_for_model(
        model, input_size, gradients=gradients, attention_dtype=attention_dtype, layers=layers
    )
    per_image = one.needed + RESULTS_IN_FLIGHT * one.kept
    return max(1, min(limit, int(USABLE_FRACTION * free // max(1, per_image))))


def iter_analyses(
    loaded: LoadedModel,
    images: Iterable[Any],
    *,
    device: str | torch.device | None = None,
    batch_size: int | None = None,
    preprocessing: Preprocessing | None = None,
    attention_dtype: torch.dtype = torch.float32,
    gradients: bool = False,
    max_side: int | None = OVERLAY_MAX_SIDE,
    layers: LayerSpec = None,
) -> Iterator[BatchItem]:
    """One BatchItem per image, in order (see the module docstring); the arguments are
    ``analyze``'s, plus ``batch_size`` (None: ``choose_batch_size`` for the first input)."""
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"the batch size must be at least 1 (got {batch_size})")
    model, dev, prep, channels = _setup(loaded, device, preprocessing, attention_dtype)
    patch = model.config.patch_size
    kept = parse_layers(layers, int(model.config.depth))
    run = _Run(loaded, model, dev, patch, gradients, attention_dtype, kept)

    def plan(size: tuple[int, int]) -> object:
        return check_analysis_memory(
            model, size, gradients=gradients, attention_dtype=attention_dtype, layers=run.count
        )

    pending: list[tuple[int, Any, _Input]] = []
    size = batch_size
    for index, image in enumerate(images):
        try:
            inp = _prepare(image, prep, channels, patch, max_side, plan)
        except VitvizError as exc:
            yield from run(pending)
            pending = []
            yield BatchItem(index, image, None, exc)
            continue
        if pending and pending[0][2].x.shape != inp.x.shape:
            yield from run(pending)
            pending = []
        if size is None:
            hw = (inp.x.shape[1], inp.x.shape[2])
            size = choose_batch_size(
                model, hw, gradients=gradients, attention_dtype=attention_dtype, layers=run.count
            )
        pending.append((index, image, inp))
        if len(pending) >= size:
            yield from run(pending)
            pending = []
    yield from run(pending)


@dataclass
class _Run:
    """Runs the forward pass of one batch (one at a time when the batch would not fit)."""

    loaded: LoadedModel
    model: Any
    dev: torch.device
    patch: int
    gradients: bool
    attention_dtype: torch.dtype
    layers: tuple[int, ...] | None  # the model layers kept (None: every layer)

    @property
    def count(self) -> int | None:
        return None if self.layers is None else len(self.layers)

    def __call__(self, pending: Sequence[tuple[int, Any, _Input]]) -> Iterator[BatchItem]:
        if not pending:
            return
        if len(pending) > 1:
            x = pending[0][2].x
            try:
                check_analysis_memory(
                    self.model,
                    (x.shape[1], x.shape[2]),
                    gradients=self.gradients,
                    attention_dtype=self.attention_dtype,
                    batch=len(pending),
                    layers=self.count,
                )
            except NotEnoughMemoryError:  # each image alone was planned: run them one by one
                for item in pending:
                    yield from self([item])
                return
        xb = torch.stack([inp.x for _, _, inp in pending]).to(self.dev)  # (B, C, H, W)
        caps = capture_batch(
            self.model,
            xb,
            self.patch,
            attention_dtype=self.attention_dtype,
            gradients=self.gradients,
            layers=self.layers,
        )
        del xb
        for (index, image, inp), cap in zip(pending, caps, strict=True):
            try:
                analysis = _analysis(self.loaded, inp, cap, self.patch, self.dev)
                yield BatchItem(index, image, analysis)
            except VitvizError as exc:  # non-finite numbers in this image only
                yield BatchItem(index, image, None, exc)
        caps.clear()


def analyze_batch(
    loaded: LoadedModel,
    images: Iterable[Any],
    *,
    device: str | torch.device | None = None,
    batch_size: int | None = None,
    preprocessing: Preprocessing | None = None,
    attention_dtype: torch.dtype = torch.float32,
    gradients: bool = False,
    max_side: int | None = OVERLAY_MAX_SIDE,
    layers: LayerSpec = None,
) -> list[Analysis]:
    """``analyze`` for many images, the forward passes in batches on the device: one Analysis
    per image, in order. Raises the first image's error (``iter_analyses`` goes on past them).
    Every Analysis is kept: for many large images iterate ``iter_analyses`` instead."""
    out = []
    for item in iter_analyses(
        loaded,
        images,
        device=device,
        batch_size=batch_size,
        preprocessing=preprocessing,
        attention_dtype=attention_dtype,
        gradients=gradients,
        max_side=max_side,
        layers=layers,
    ):
        if item.error is not None:
            raise item.error
        assert item.analysis is not None
        out.append(item.analysis)
    return out
