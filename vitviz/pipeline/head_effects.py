"""Every head's effect on a class, and activation patching, for a model of any kind (DESIGN §5,
"Interventions"), through the kinds' intermediates accessor (DESIGN §3).

- Head effect of (l, h) for class c: y_c(full) − y_c(head ablated alone), in logits; the
  probabilities' change beside it (the kind's probabilities: a softmax, a SigLIP's sigmoids).
- Activation patching (clean image A, corrupted B): B's pass with head (l, h)'s output taken
  from A's pass; effect (y_c(patched) − y_c(B)) / (y_c(A) − y_c(B)), c = A's top class.

The L · H single-head passes go through in batches (``vitviz.pipeline.head_passes``): the image
stacked once per row, row j with its head (l, h) replaced in that row alone (the accessor's
``OnRows``); every other row computes that head as the full pass did, so each row is exactly its
single-head pass. A batch holds heads of one layer (a CPU's plan) or of several (a GPU's: fewer,
bigger passes); the blocks below its lowest layer are not run again: they hand the batch their
outputs of the full pass (``vitviz.pipeline.reuse``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from vitviz.kindapi import Intermediates, ModelKind, OnRows
from vitviz.pipeline.head_passes import PassPlan, plan_for
from vitviz.pipeline.interventions import (
    Ablation,
    HeadLayout,
    InterventionError,
    check_ablation,
    fixed_value,
    head_layout,
    model_input,
)
from vitviz.pipeline.reuse import BlockCache


@dataclass(frozen=True)
class HeadEffects:
    """``effect`` (L, H) float32 y_c(full) − y_c(head ablated), NaN for a head its layer lacks;
    ``effect_prob`` (L, H) the same of the probabilities; ``target`` c; ``logits`` (classes,)
    of the full pass; ``mode`` the ablation's name ("zero", "mean", "dataset-mean",
    "tensor")."""

    effect: Tensor
    effect_prob: Tensor
    target: int
    logits: Tensor
    mode: str


@dataclass(frozen=True)
class PatchingEffects:
    """``effect`` (L, H) float32 (y_c(patched) − y_c(B)) / (y_c(A) − y_c(B)), NaN for a head its
    layer lacks; ``target`` c; ``clean_logits`` and ``corrupted_logits`` (classes,)."""

    effect: Tensor
    target: int
    clean_logits: Tensor
    corrupted_logits: Tensor


def _target(logits: Tensor, target: int | None) -> int:
    classes = logits.shape[-1]
    if classes == 0:
        raise InterventionError("the model has no classes (no head, no prompts) to measure on")
    c = int(logits.argmax()) if target is None else target
    if not 0 <= c < classes:
        raise InterventionError(f"class {c}: the model has classes 0–{classes - 1}")
    return c


def full_pass(kind: ModelKind, model: nn.Module, x: Tensor) -> tuple[Intermediates, Any]:
    """The full pass of ``x`` (1, C, H, W) and its blocks' outputs for the single-head passes
    to reuse (None where they can't)."""
    layout = head_layout(kind, model, x)
    with torch.no_grad():
        return BlockCache.capture(
            lambda: kind.intermediates(model, x), layout.blocks, layout.projections
        )


def kept_bytes(base: Intermediates) -> int:
    """Bytes the full pass ``base`` (batch 1) kept: its heads' and blocks' outputs, about what
    one row of a logits-only pass needs at its peak (the memory plan's row, DESIGN §7)."""
    kept = (*base.heads, *base.blocks, *base.block_prefix)
    return sum(t.numel() * t.element_size() for t in kept)


def pass_plan(
    x: Tensor, base: Intermediates, batch: int | None = None, plan: str | None = None
) -> PassPlan:
    """The single-head passes for ``x`` (1, C, H, W) on its device: ``plan_for`` with ``batch``
    rows per pass at most; InterventionError for a plan or batch that is none."""
    counts = [int(h.shape[1]) for h in base.heads]
    try:
        return plan_for(counts, x.device, plan, batch, kept_bytes(base))
    except ValueError as exc:
        raise InterventionError(str(exc)) from None


def single_head_logits(
    kind: ModelKind,
    model: nn.Module,
    x: Tensor,
    base: Intermediates,
    value_of: Callable[[int, int], Tensor | None],
    batch: int | None = None,
    cache: BlockCache | None = None,
    plan: str | PassPlan | None = None,
) -> Tensor:
    """(L, H, classes) logits of ``x`` (1, C, H, W) with one head at a time replaced by
    ``value_of(layer, head)`` ((N, head_dim), or None: zero), NaN rows for heads a layer lacks;
    ``base`` the full pass of ``x``. The passes as ``plan`` says (a ``PassPlan``, or its name
    for ``pass_plan`` with ``batch`` rows per pass at most; default by device); ``cache`` the
    full pass's block outputs: the blocks below each pass's lowest layer are not run again.
    Each pass keeps its logits alone (the accessor's ``logits_only``)."""
    counts = [int(h.shape[1]) for h in base.heads]
    chosen = plan if isinstance(plan, PassPlan) else pass_plan(x, base, batch, plan)
    out = base.logits.new_full((len(counts), max(counts), base.logits.shape[1]), float("nan"))
    # each row's index, made once, on the host: OnRows checks them there without a sync
    rows = torch.arange(max(chosen.widest, 1))
    keys = torch.tensor([key for p in chosen.passes for key in p], device=out.device).T
    done = 0
    with torch.no_grad():
        for heads in chosen.passes:
            k = len(heads)
            replace: dict[tuple[int, int], Tensor | OnRows | None] = {}
            for j, (layer, head) in enumerate(heads):
                new = value_of(layer, head)
                replace[(layer, head)] = OnRows(rows[j : j + 1], None if new is None else new[None])
            below = cache.below(PassPlan.start(heads), k) if cache is not None else nullcontext()
            with below:
                logits = kind.intermediates(
                    model, x.expand(k, -1, -1, -1), replace=replace, logits_only=True
                ).logits
            # written as it comes (no launch of its own waits: the indices are on the device)
            out[keys[0, done : done + k], keys[1, done : done + k]] = logits
            done += k
    return out


def _mode_name(ablation: Ablation) -> str:
    if isinstance(ablation, str):
        return ablation
    return "tensor" if isinstance(ablation, Tensor) else "dataset-mean"


def head_effects(
    loaded: Any,
    image: Any,
    target: int | None = None,
    mode: Ablation = "zero",
    batch: int | None = None,
    plan: str | PassPlan | None = None,
) -> HeadEffects:
    """Every head's effect on class ``target`` (default the top prediction; for a CLIP, the
    prompt) of ``image`` under ablation ``mode`` ("zero", "mean", a (head_dim,) tensor or a
    ``DatasetMean``): one full pass, then the single-head passes, ``batch`` heads at a time
    at most, grouped as ``plan`` says ("per-layer", "multi-layer" or a ``PassPlan``; default
    by device, ``vitviz.pipeline.head_passes``)."""
    check_ablation(mode)
    kind, model = loaded.kind, loaded.model
    x = model_input(loaded, image)
    base, cache = full_pass(kind, model, x)
    layout = HeadLayout.of(base)
    c = _target(base.logits[0], target)

    def value_of(layer: int, head: int) -> Tensor | None:
        if isinstance(mode, str) and mode == "mean":
            own = base.heads[layer][0, head]  # (N, hd)
            return own.mean(dim=0, keepdim=True).expand_as(own)
        value = fixed_value(mode, layout, layer, head)
        return None if value is None else value.expand(base.heads[layer].shape[2], -1)

    ablated = single_head_logits(kind, model, x, base, value_of, batch, cache, plan)  # (L, H, C)
    full = base.logits[0]
    probs = kind.probabilities(model, torch.cat([full[None], ablated.flatten(0, 1)]))
    missing = ablated[..., 0].isnan()
    effect_prob = (probs[0, c] - probs[1:, c].view(missing.shape)).masked_fill(missing, torch.nan)
    return HeadEffects(
        effect=(full[c] - ablated[..., c]).float().cpu(),
        effect_prob=effect_prob.float().cpu(),
        target=c,
        logits=full.float().cpu(),
        mode=_mode_name(mode),
    )


def _pair(loaded: Any, clean: Any, corrupted: Any) -> tuple[Tensor, Tensor, Intermediates,
                                                             Intermediates, Any]:  # fmt: skip
    kind, model = loaded.kind, loaded.model
    xa, xb = model_input(loaded, clean), model_input(loaded, corrupted)
    with torch.no_grad():
        a = kind.intermediates(model, xa)
    b, cache = full_pass(kind, model, xb)
    for layer, (ha, hb) in enumerate(zip(a.heads, b.heads, strict=True)):
        if ha.shape != hb.shape:
            raise InterventionError(
                f"the clean and corrupted images give layer {layer} {ha.shape[2]} and "
                f"{hb.shape[2]} tokens: patching needs two inputs of one size"
            )
    return xa, xb, a, b, cache


def patched_logits(
    loaded: Any, clean: Any, corrupted: Any, heads: Sequence[tuple[int, int]]
) -> Tensor:
    """(classes,) logits of ``corrupted``'s pass with ``heads``' outputs taken from
    ``clean``'s pass, all at once."""
    _, xb, a, b, _ = _pair(loaded, clean, corrupted)
    chosen = HeadLayout.of(a).check_heads(list(heads))
    if not chosen:
        return b.logits[0].float().cpu()
    # A later layer's clean output is wanted as it is (not what it becomes below the patch).
    replace = {(layer, head): a.heads[layer][:, head] for layer, head in chosen}
    with torch.no_grad():
        out = loaded.kind.intermediates(loaded.model, xb, replace=replace)
    return out.logits[0].float().cpu()


def patching_effects(
    loaded: Any,
    clean: Any,
    corrupted: Any,
    target: int | None = None,
    batch: int | None = None,
    plan: str | PassPlan | None = None,
) -> PatchingEffects:
    """Every head's patching effect from ``clean`` (A) into ``corrupted`` (B) on class
    ``target`` (default A's top class), the passes as ``head_effects``' (``batch``, ``plan``);
    InterventionError when A and B give c one logit (the effect's denominator)."""
    _, xb, a, b, cache = _pair(loaded, clean, corrupted)
    c = _target(a.logits[0], target)
    ya, yb = a.logits[0, c], b.logits[0, c]
    if float(ya - yb) == 0.0:
        raise InterventionError(
            f"the clean and corrupted images give class {c} the same logit: nothing to patch"
        )

    def value_of(layer: int, head: int) -> Tensor:
        return a.heads[layer][0, head]

    patched = single_head_logits(loaded.kind, loaded.model, xb, b, value_of, batch, cache, plan)
    return PatchingEffects(
        effect=((patched[..., c] - yb) / (ya - yb)).float().cpu(),
        target=c,
        clean_logits=a.logits[0].float().cpu(),
        corrupted_logits=b.logits[0].float().cpu(),
    )
