"""What every method of the CAM family reads (DESIGN §5): one layer's features A (B, C, h, w) on
its block's grid and, for the gradient-weighted ones, G = ∂y_c/∂A, taken through the kind
contract (``ModelKind.feature_site`` and ``intermediates``), so each method is written once for
every kind. The forward passes of the gradient-free ones (masked inputs, ablated channels) run
in batches, report progress and can be cancelled (``reporting``).

y_c is the class's logit (a CLIP's prompt score): the output the class is read from. The
gradient is taken back to the layer only (``torch.autograd.grad`` of y_c with respect to the
layer's tokens), never further.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from vitviz.explain.params import Parameter
from vitviz.explain.tokens import min_max_scale
from vitviz.kindapi import ModelKind, get_kind
from vitviz.kindapi.feature_sites import DEFAULT_LAYER, FeatureSite, LayerChoice, parse_layer

CAM_BATCH = 16  # forward passes a gradient-free CAM runs at once
_CACHE_ATTR = "_cam_cache"
_CACHE_SIZE = 4


class CamCancelledError(Exception):
    """The user cancelled a CAM's forward passes."""


@dataclass(frozen=True)
class Reporter:
    progress: Callable[[int, int], None] | None = None  # (passes done, passes in all)
    cancelled: Callable[[], bool] | None = None


_REPORTER: contextvars.ContextVar[Reporter] = contextvars.ContextVar("cam_reporter")


@contextlib.contextmanager
def reporting(
    progress: Callable[[int, int], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> Iterator[None]:
    """Inside it, a batched CAM calls ``progress(done, total)`` after each batch of forward
    passes and raises ``CamCancelledError`` as soon as ``cancelled()`` is true."""
    token = _REPORTER.set(Reporter(progress, cancelled))
    try:
        yield
    finally:
        _REPORTER.reset(token)


def report(done: int, total: int) -> None:
    """Progress of a batched CAM; ``CamCancelledError`` when the caller cancelled."""
    r = _REPORTER.get(Reporter())
    if r.cancelled is not None and r.cancelled():
        raise CamCancelledError(f"cancelled after {done} of {total} forward passes")
    if r.progress is not None:
        r.progress(done, total)


@dataclass(frozen=True)
class LayerPass:
    """One pass's features of the chosen layer: ``activations`` (B, C, h, w) on its block's
    grid, ``gradients`` ∂y_c/∂activations (same shape) or None, ``logits`` (B, classes),
    ``target`` (B,) the classes explained (−1 without a head), ``layer`` the block and part
    read."""

    activations: Tensor
    gradients: Tensor | None
    logits: Tensor
    target: Tensor
    layer: LayerChoice


def _targets(logits: Tensor, target: int | Tensor | None) -> Tensor:
    if target is None:
        return logits.argmax(dim=-1)
    if isinstance(target, Tensor):
        return target.to(device=logits.device, dtype=torch.long).reshape(-1)
    return torch.full((logits.shape[0],), int(target), dtype=torch.long, device=logits.device)


@contextlib.contextmanager
def _edited(site: FeatureSite, keep: list[Tensor], edit: Callable[[Tensor], Tensor] | None):
    """A forward hook on the site's module: its token tensor kept (after ``edit``)."""

    def hook(_module: nn.Module, _args: tuple, output: Any) -> Any:
        tokens = site.tensor(output)
        if edit is None:
            keep.append(tokens)
            return None
        changed = edit(tokens)
        keep.append(changed)
        return site.replace(output, changed)

    handle = site.module.register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


def layer_pass(
    kind: ModelKind,
    model: nn.Module,
    x: Tensor,
    layer: str = DEFAULT_LAYER,
    target: int | Tensor | None = None,
    *,
    gradients: bool = True,
) -> LayerPass:
    """``layer``'s features of ``model`` for x (B, C, H, W), with ∂y_c/∂features when
    ``gradients`` (``target``: a class, (B,) classes, or None for each image's top class)."""
    site = kind.feature_site(model, x, parse_layer(layer))
    choice = site.layer  # ``auto`` as the kind reads it (DESIGN §5)
    keep: list[Tensor] = []
    with torch.inference_mode(False), torch.set_grad_enabled(gradients), _edited(site, keep, None):
        inter = kind.intermediates(model, x)
        logits = inter.logits
        if logits.shape[-1] == 0 and (gradients or target is not None):
            raise ValueError("a CAM needs a class score, and this model has no head or prompts")
        c = _targets(logits, target) if logits.shape[-1] else logits.new_full((len(x),), -1).long()
        grads = None
        if gradients:
            y = logits.gather(1, c[:, None]).sum()
            (grads,) = torch.autograd.grad(y, keep[-1])
    grid = tuple(int(v) for v in inter.block_grids[choice.block].grid)
    tokens = keep[-1]  # channels last; too few values for B images' grids of C channels?
    if tokens.numel() < len(x) * tokens.shape[-1] * grid[0] * grid[1]:
        count = tokens.numel() // (len(x) * tokens.shape[-1])
        raise ValueError(
            f"layer {layer} gives {count} token(s), not its block's {grid[0]} × "
            f"{grid[1]} grid (a class-attention block's norm2 reads the CLS alone); pick the "
            "block's norm1 or output"
        )
    on_grid = site.to_grid
    acts = on_grid(keep[-1].detach(), grid)
    return LayerPass(
        activations=acts,
        gradients=None if grads is None else on_grid(grads.detach(), grid),
        logits=logits.detach(),
        target=c,
        layer=choice,
    )


def batched_scores(
    kind: ModelKind,
    model: nn.Module,
    inputs: Callable[[Sequence[int]], Tensor],
    count: int,
    score: Callable[[Tensor, Sequence[int]], Tensor],
    *,
    site: FeatureSite | None = None,
    edit: Callable[[Tensor, Sequence[int]], Tensor] | None = None,
) -> Tensor:
    """(count,) scores of ``count`` forward passes run ``CAM_BATCH`` at a time: pass i reads
    ``inputs(indices)`` (the batch's inputs) with, when given, ``edit(tokens, indices)`` applied
    to ``site``'s tokens inside the pass; ``score(logits, indices)`` (n,). Reports progress."""
    out = []
    report(0, count)
    for start in range(0, count, CAM_BATCH):
        idx = list(range(start, min(start + CAM_BATCH, count)))
        keep: list[Tensor] = []
        hooked = (
            _edited(site, keep, lambda t, i=idx: edit(t, i))  # type: ignore[misc]
            if site is not None and edit is not None
            else contextlib.nullcontext()
        )
        with torch.no_grad(), hooked:
            logits = kind.intermediates(model, inputs(idx), logits_only=True).logits
        out.append(score(logits, idx).detach())
        report(idx[-1] + 1, count)
    return torch.cat(out)


# -- the table's side ---------------------------------------------------------------------------


def cached(analysis: Any, key: tuple, build: Callable[[], Tensor]) -> Tensor:
    """A few per-analysis CAM maps kept (they don't depend on the query): a copy of each."""
    cache: dict[tuple, Tensor] = vars(analysis).setdefault(_CACHE_ATTR, {})
    if key not in cache:
        if len(cache) >= _CACHE_SIZE:
            cache.pop(next(iter(cache)))
        cache[key] = build()
    return cache[key].clone()


def analysis_input(analysis: Any) -> tuple[ModelKind, nn.Module, Tensor, int]:
    """The kind the analysis carries, its model, its input (1, C, H, W) on the model's device
    and dtype, and the class explained by default (its top prediction)."""
    loaded = getattr(analysis, "loaded", None)
    if loaded is None:
        raise ValueError("a CAM needs the model itself, and this analysis has none attached")
    model = loaded.model
    p = next(model.parameters())
    return (
        get_kind(analysis.kind),
        model,
        analysis.input[None].to(p.device, p.dtype),
        int(analysis.top_class),
    )


CamFormula = Callable[[Tensor, Tensor], Tensor]  # (A, G) (B, C, h, w) -> (B, h, w)


def gradient_method(name: str, formula: CamFormula) -> Callable[..., Tensor]:
    """The table's compute of a gradient-weighted CAM: ``formula(A, G)`` on the analysis's
    layer ``params['layer']``, for the class (None: the top one); (h, w) float32."""

    def compute(
        analysis: Any, query: object, target_class: int | None, params: Mapping[str, Any]
    ) -> Tensor:
        kind, model, x, top = analysis_input(analysis)
        cls = top if target_class is None else int(target_class)
        layer = str(params.get("layer", DEFAULT_LAYER))

        def build() -> Tensor:
            lp = layer_pass(kind, model, x, layer, cls)
            assert lp.gradients is not None
            a, g = lp.activations.double(), lp.gradients.double()
            cam = formula(a, g)
            floor = rounding_floor(formula(a.abs(), g.abs()), lp.activations.dtype)
            return min_max_scale(flat_within(cam, floor))[0].float().cpu()

        return cached(analysis, (name, cls, layer), build)

    return compute


ROUNDING_ULPS = 16  # a map whose span is within 16 ulps of its terms' size is rounding alone


def rounding_floor(magnitude: Tensor, dtype: torch.dtype) -> Tensor:
    """(B,) the span below which a map is rounding, not signal: ``ROUNDING_ULPS`` of the
    pass's float type times the largest value of the formula on |A|, |G| (B, h, w), the size
    of the terms it sums."""
    return ROUNDING_ULPS * torch.finfo(dtype).eps * magnitude.flatten(1).amax(dim=1)


def flat_within(cam: Tensor, floor: Tensor) -> Tensor:
    """(B, h, w) maps, each made all zero where its span is within its ``floor`` (B,): the
    definition's value there is a constant map (e.g. HiResCAM on tokens that only a LayerNorm
    reads, Σ_k G_k A_k = 0 at every token up to its ε), which min-max scaling shows as zero,
    not as float32 rounding stretched to [0, 1]."""
    span = cam.flatten(1).amax(dim=1) - cam.flatten(1).amin(dim=1)
    return torch.where((span <= floor)[:, None, None], torch.zeros_like(cam), cam)


PassesCam = Callable[[ModelKind, nn.Module, Tensor, str, int], Tensor]  # -> (h, w)


def passes_method(name: str, cam: PassesCam) -> Callable[..., Tensor]:
    """The table's compute of a CAM that runs passes of its own (Score-CAM, Ablation-CAM):
    ``cam(kind, model, x, layer, class)`` on the analysis's input, for the class (None: the
    top one); (h, w) float32, min-max scaled."""

    def compute(
        analysis: Any, query: object, target_class: int | None, params: Mapping[str, Any]
    ) -> Tensor:
        kind, model, x, top = analysis_input(analysis)
        cls = top if target_class is None else int(target_class)
        layer = str(params.get("layer", DEFAULT_LAYER))

        def build() -> Tensor:
            return min_max_scale(cam(kind, model, x, layer, cls)[None])[0].float().cpu()

        return cached(analysis, (name, cls, layer), build)

    return compute


def cam_from_weights(activations: Tensor, weights: Tensor) -> Tensor:
    """ReLU(Σ_k w_k A_k): activations (B, C, h, w), weights (B, C) -> (B, h, w)."""
    return (activations * weights[:, :, None, None]).sum(dim=1).clamp_min(0)


LAYER_HELP = (
    "BLOCK.PART: a block from 0 (-1 the last) and its norm1, norm2 or output "
    "(e.g. 1.norm1; a bare block is its output; a post-norm block's norm1 follows its "
    "attention); auto: the last block's norm1 where it is a pre-norm (the tokens its attention "
    "reads), else the block's output (a Swin v2's, a residual post-norm ViT's); a Hiera's norm2"
)


class LayerParameter(Parameter):
    """The CAM family's ``layer`` (text ``BLOCK.PART``), its form checked here, its block
    against the model when the map is made."""

    def check(self, value: Any, num_layers: int | None = None, num_heads: int | None = None,
              _default: bool = False) -> Any:  # fmt: skip
        text = super().check(value, num_layers, num_heads, _default)
        return parse_layer(text).text


def layer_parameter() -> LayerParameter:
    return LayerParameter("layer", str, DEFAULT_LAYER, "Target layer", help=LAYER_HELP)
