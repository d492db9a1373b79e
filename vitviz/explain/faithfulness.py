"""Faithfulness of explanation maps: deletion and insertion curves (DESIGN §5).

Exact definition, so any two implementations agree:

- target: the top class of the unperturbed image; order: the patches by the map, highest
  first, ties by the lower patch index (a stable sort); P patches, S steps,
  m_k = (k·P + S // 2) // S for k = 0 … S;
- deletion: the normalised model input with the first m_k patches set to 0 (the
  normalisation's mean colour); insertion: the all-zero input with the first m_k patches
  restored; p_k = softmax probability of the target;
- AUC = Σ_{k<S} (p_k + p_{k+1}) / (2S).

All perturbed inputs of all maps go through the model in a few batches, on its device.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from vitviz.explain.localisation import Localisation, localise
from vitviz.kindapi import KindAnalysis, ModelKind

DEFAULT_STEPS = 20
DEFAULT_BATCH = 64


@dataclass
class Curves:
    """One map's curves on one image: p_0 … p_S for deletion and insertion, and their AUCs."""

    deletion: list[float]
    insertion: list[float]
    deletion_auc: float
    insertion_auc: float
    localisation: Localisation | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "deletion": self.deletion,
            "insertion": self.insertion,
            "deletion_auc": self.deletion_auc,
            "insertion_auc": self.insertion_auc,
        }
        if self.localisation is not None:
            d.update(self.localisation.to_dict())
        return d


@dataclass
class ImageFaithfulness:
    """Every map's curves on one image."""

    image: str
    target_class: int
    steps: int
    methods: dict[str, Curves] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "image": self.image,
            "target_class": self.target_class,
            "methods": {name: c.to_dict() for name, c in self.methods.items()},
        }


def step_counts(num_patches: int, steps: int) -> list[int]:
    """m_k = (k·P + S // 2) // S for k = 0 … S."""
    return [(k * num_patches + steps // 2) // steps for k in range(steps + 1)]


def patch_order(values: Tensor | np.ndarray) -> np.ndarray:
    """Patch indices (row-major) by value, highest first, ties by lower index: (gh, gw) -> (P,)."""
    v = np.asarray(
        values.detach().cpu().double().numpy() if isinstance(values, Tensor) else values,
        dtype=np.float64,
    ).reshape(-1)
    if not np.isfinite(v).all():
        raise ValueError("the map holds NaN or infinite values, so it gives no patch order")
    return np.argsort(-v, kind="stable")


def auc(curve: Sequence[float]) -> float:
    """Σ_{k<S} (p_k + p_{k+1}) / (2S) for p_0 … p_S."""
    S = len(curve) - 1
    if S < 1:
        raise ValueError("a curve needs at least two points")
    return float(sum((curve[k] + curve[k + 1]) for k in range(S)) / (2 * S))


def _check_steps(steps: int) -> None:
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a whole number of at least 1 (got {steps!r})")


def _kept_masks(order: np.ndarray, counts: list[int], grid: tuple[int, int]) -> Tensor:
    """(S+1, gh, gw) bool: patch i is among the first m_k of ``order``."""
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = np.arange(order.size)
    m = np.asarray(counts)[:, None]
    return torch.from_numpy(rank[None, :] < m).reshape(len(counts), *grid)


def faithfulness(
    model: nn.Module,
    image: Tensor | Any,
    maps: Mapping[str, Tensor | np.ndarray],
    *,
    steps: int = DEFAULT_STEPS,
    batch_size: int = DEFAULT_BATCH,
    name: str = "",
    device: str | torch.device | None = None,
    mask: Tensor | np.ndarray | None = None,
    target_class: int | None = None,
    kind: ModelKind | None = None,
) -> ImageFaithfulness:
    """Deletion and insertion curves of each map in ``maps`` ({name: (gh, gw)}) on one image,
    of ``target_class``'s probability (None: the top class's), as the model's kind scores its
    classes (``ModelKind.probabilities``: a softmax; a SigLIP's prompts, each its sigmoid).

    ``model``: a ViT with a head (or a LoadedModel); ``image``: the normalised model input
    (C, H, W) / (1, C, H, W) or an Analysis (its ``input``). Runs on ``device`` (None: where
    the model is) in the model's dtype; p_k are floats (float64 in the result). ``name``: the
    image's path as reported. ``mask``: a (gh, gw) bool patch mask of the object (see
    ``mask_to_grid``); with it each method also gets its localisation numbers. ``kind``: the
    model's kind (None: the one a LoadedModel carries, else the registry's for a bare model).
    """
    if kind is None and hasattr(model, "model"):  # a LoadedModel: the kind it carries
        kind = model.kind
    model = getattr(model, "model", model)
    _check_steps(steps)
    if batch_size < 1:
        raise ValueError(f"batch size must be at least 1 (got {batch_size})")
    x = getattr(image, "input", image)
    if not isinstance(x, Tensor):
        raise ValueError("faithfulness needs the model input tensor or an Analysis")
    x = x[0] if x.ndim == 4 and x.shape[0] == 1 else x
    if x.ndim != 3:
        raise ValueError(f"the model input must be (C, H, W), got {tuple(x.shape)}")
    if getattr(model.config, "num_classes", 0) == 0:
        raise ValueError("faithfulness needs a classification head, and this model has none")
    param = next(model.parameters())
    dev = torch.device(device) if device is not None else param.device
    x = x.to(dev, param.dtype)
    if kind is None:  # a bare model handed to the Python API: its kind worked out here
        from vitviz.kindapi import kind_of

        kind = kind_of(model)
    grid, p = _cells(model, kind, image, x)
    P = grid[0] * grid[1]
    counts = step_counts(P, steps)
    names = list(maps)
    kept = []
    for n in names:
        values = maps[n]
        if tuple(values.shape) != grid:
            raise ValueError(f"the {n} map is {tuple(values.shape)}, the model's grid is {grid}")
        kept.append(_kept_masks(patch_order(values), counts, grid))
    with torch.inference_mode():
        logits = model(x[None])
        target = int(logits[0].argmax()) if target_class is None else int(target_class)
        probs = _probabilities(model, kind, x, kept, target, p, batch_size)  # (M, 2, S+1)
    result = ImageFaithfulness(image=name, target_class=target, steps=steps)
    for i, n in enumerate(names):
        deletion = [float(v) for v in probs[i, 0]]
        insertion = [float(v) for v in probs[i, 1]]
        loc = localise(maps[n], mask) if mask is not None else None
        result.methods[n] = Curves(deletion, insertion, auc(deletion), auc(insertion), loc)
    return result


def _cells(model: nn.Module, kind: ModelKind, image: Any, x: Tensor) -> tuple[tuple[int, int], int]:
    """The cells the curves delete: an analysis's clickable grid (its kind's token geometry)
    and its cells' side in pixels, else the model's patch grid. A grid that leaves at most one
    cell's width uncovered at the bottom and right (a PiT's stem of kernel 16, stride 8: 27
    cells of 8 px on 224, its last token reading the last 16 px) gives that margin to its last
    row's and column's cells."""
    H, W = x.shape[-2:]
    if isinstance(image, KindAnalysis):
        geometry = kind.token_geometry(image)
        grid, p = (int(geometry.grid[0]), int(geometry.grid[1])), int(geometry.cell_pixels)
        if 0 <= H - grid[0] * p <= p and 0 <= W - grid[1] * p <= p:
            return grid, p
    p = model.config.patch_size
    if H % p or W % p:
        raise ValueError(f"the input {H}×{W} is not divisible by the patch size {p}")
    return (H // p, W // p), p


def _probabilities(
    model: nn.Module,
    kind: ModelKind,
    x: Tensor,
    kept: list[Tensor],
    target: int,
    patch: int,
    batch_size: int,
) -> np.ndarray:
    """p_k of the target for every map × (deletion, insertion) × k: (M, 2, S+1) float64, as
    ``kind`` scores the model's classes."""
    scores = kind.probabilities
    M, S1 = len(kept), (kept[0].shape[0] if kept else 0)
    if M == 0:
        return np.zeros((0, 2, 0))
    all_kept = torch.stack(kept).reshape(M * S1, *kept[0].shape[1:])  # (M·(S+1), gh, gw)
    jobs = [(j, deletion) for j in range(M * S1) for deletion in (True, False)]
    out = np.empty(len(jobs), dtype=np.float64)
    for start in range(0, len(jobs), batch_size):
        chunk = jobs[start : start + batch_size]
        masks = all_kept[[j for j, _ in chunk]].to(x.device)  # (b, gh, gw)
        H, W = x.shape[-2:]  # each pixel's cell (a margin the last row's and column's)
        rows = (torch.arange(H, device=x.device) // patch).clamp_max(masks.shape[1] - 1)
        cols = (torch.arange(W, device=x.device) // patch).clamp_max(masks.shape[2] - 1)
        pixels = masks[:, rows][:, :, cols][:, None]
        deletion = torch.tensor([d for _, d in chunk], device=x.device)[:, None, None, None]
        keep = torch.where(deletion, ~pixels, pixels)  # (b, 1, H, W)
        batch = x[None] * keep.to(x.dtype)
        prob = scores(model, model(batch))[:, target]
        out[start : start + len(chunk)] = prob.double().cpu().numpy()
    return out.reshape(M, S1, 2).transpose(0, 2, 1)


def summary(results: Sequence[ImageFaithfulness]) -> dict[str, dict[str, Any]]:
    """{name: {deletion_auc: mean, insertion_auc: mean, images: n}} over the images that have
    the method; with masks also mass_in_mask (mean), pointing_game (hit rate), masked_images."""
    out: dict[str, dict[str, Any]] = {}
    names: list[str] = []
    for r in results:
        names += [n for n in r.methods if n not in names]
    for n in names:
        curves = [r.methods[n] for r in results if n in r.methods]
        entry: dict[str, Any] = {
            "deletion_auc": float(np.mean([c.deletion_auc for c in curves])),
            "insertion_auc": float(np.mean([c.insertion_auc for c in curves])),
            "images": len(curves),
        }
        located = [c.localisation for c in curves if c.localisation is not None]
        if located:
            masses = [loc.mass_in_mask for loc in located if not math.isnan(loc.mass_in_mask)]
            entry["mass_in_mask"] = float(np.mean(masses)) if masses else None
            entry["pointing_game"] = float(np.mean([loc.pointing_hit for loc in located]))
            entry["masked_images"] = len(located)
        out[n] = entry
    return out


def report(results: Sequence[ImageFaithfulness]) -> dict[str, Any]:
    """The JSON of ``vitviz-cli faithfulness``: {"steps", "images": [...], "summary": {...}}."""
    steps = {r.steps for r in results}
    if len(steps) > 1:
        raise ValueError(f"the images were measured with different step counts: {sorted(steps)}")
    return {
        "steps": steps.pop() if steps else DEFAULT_STEPS,
        "images": [r.to_dict() for r in results],
        "summary": summary(results),
    }


def csv_rows(results: Sequence[ImageFaithfulness]) -> list[list[Any]]:
    """One header row, then one row per image × method: AUCs, localisation, p_0 … p_S."""
    S = max((r.steps for r in results), default=DEFAULT_STEPS)
    header = ["image", "target_class", "method", "deletion_auc", "insertion_auc"]
    header += ["mass_in_mask", "pointing_game"]
    header += [f"deletion_{k}" for k in range(S + 1)] + [f"insertion_{k}" for k in range(S + 1)]
    rows: list[list[Any]] = [header]
    for r in results:
        for n, c in r.methods.items():
            loc = c.localisation
            mass = "" if loc is None or math.isnan(loc.mass_in_mask) else loc.mass_in_mask
            hit = "" if loc is None else int(loc.pointing_hit)
            head = [r.image, r.target_class, n, c.deletion_auc, c.insertion_auc, mass, hit]
            rows.append([*head, *c.deletion, *c.insertion])
    return rows


def evaluate_methods(
    analysis: KindAnalysis,
    names: Sequence[str],
    *,
    steps: int = DEFAULT_STEPS,
    batch_size: int = DEFAULT_BATCH,
    params: Mapping[str, Mapping[str, Any]] | None = None,
    mask: Tensor | np.ndarray | None = None,
    name: str = "",
    target_class: int | None = None,
) -> ImageFaithfulness:
    """Faithfulness of the methods ``names`` on one analysis of any kind: each map computed
    from the table for ``target_class`` (None: the image's top class) and the CLS query (a
    Swin: the average pool; ``params`` per method name), taken to the clickable grid
    (``TokenGeometry.on_grid``: a coarser layer's token gives its value to each cell it
    covers), then measured over the cells of that grid (a ViT's patches, a Swin's first-stage
    tokens).

    A parameter the kind's version of a method does not take (a Swin's rollout: discard
    ratio) is left out, as the window disables its control; an unknown one is refused.
    ValueError (plain) for a method that can't run on this model, before anything is computed.
    """
    from vitviz.explain.methods import carried_kind, get_method

    if analysis.loaded is None:
        raise ValueError("faithfulness needs the model: this analysis has none attached")
    methods = [get_method(n) for n in names]
    for m in methods:
        if m.map_kind != "scalar":
            raise ValueError(f"{m.label} is a map of colours: it puts the patches in no order")
        reason = m.unavailable(analysis)
        if reason is not None:
            raise ValueError(reason)
    model = analysis.loaded.model
    p = next(model.parameters())
    with torch.inference_mode():
        logits = model(analysis.input[None].to(p.device, p.dtype))[0]
    target = int(logits.argmax()) if target_class is None else int(target_class)
    if not 0 <= target < logits.numel():
        raise ValueError(f"class {target} is out of range: the model has {logits.numel()}")
    params = params or {}
    kind = carried_kind(analysis)
    geometry = kind.token_geometry(analysis)
    maps = {}
    for m in methods:
        given = params.get(m.name) or {}  # less what the kind's version does not take (the
        taken = {k: v for k, v in given.items() if m.parameter_refusal(kind, k) is None}
        maps[m.name] = geometry.on_grid(m(analysis, None, target, taken))  # window disables it)
    return faithfulness(
        model,
        analysis,
        maps,
        steps=steps,
        batch_size=batch_size,
        name=name,
        mask=mask,
        target_class=target,
        kind=kind,
    )
