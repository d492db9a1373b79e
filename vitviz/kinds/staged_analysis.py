"""What the staged kinds' analyses share (a Swin's, a pyramid ViT's, a PiT's; DESIGN §3): the
predictions read from their logits and the checkpoint's class names (``StagedAnalysisBase``),
the fields every one has (``StagedAnalysis``),
the ``loaded`` of a bare model (``ModelOnly``), the image decoded and prepared as ``analyze``
does it (``decode_for_model``), the fields kept of its pass (``pass_fields``), and per-block
head values padded to one (layers, most heads) array (``padded``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from torch import Tensor, nn

from vitviz.imaging.geometry import PatchGeometry


@dataclass(frozen=True)
class ModelOnly:
    """What an analysis of a bare model (no checkpoint) holds as its ``loaded``: the model,
    so the methods that run it (gradients, Grad-CAM) can; no class names."""

    model: nn.Module
    class_names: tuple[str, ...] = ()


class StagedAnalysisBase:
    """Mixin of an analysis dataclass with ``logits`` (classes,) and ``loaded``."""

    logits: Tensor
    loaded: Any
    kept_blocks: Any = None  # the BlockOutputs its own pass kept (StagedKind.keeping_blocks)

    @property
    def top_class(self) -> int:
        """The top prediction (-1 without a head)."""
        return int(self.logits.argmax()) if self.logits.numel() else -1

    @property
    def has_head(self) -> bool:
        return self.logits.numel() > 0

    @property
    def class_names(self) -> list[str]:
        """The checkpoint's class names (empty for an analysis of a bare model)."""
        return list(getattr(self.loaded, "class_names", None) or [])


@dataclass(kw_only=True)
class StagedAnalysis(StagedAnalysisBase):
    """The fields every staged kind's analysis (batch of one) has, keyword-only after its own:
    the predictions, the attention gradients when taken, the input and what the window draws
    it over, the clickable cell's size and the model analysed."""

    logits: Tensor  # (C,) (empty without a head)
    probs: Tensor  # (C,)
    target_class: int  # the class y_c the gradients are of (-1 without a head)
    gradients: list[Tensor] | None = None  # per layer ∂y_c/∂A, like the kind's ``attentions``
    input: Tensor | None = None  # (C, H, W) the normalised model input
    pixels: Any = None  # (H, W, 3) uint8 of the input when it came from an image
    source: Any = None  # the decoded source image (at most OVERLAY_MAX_SIDE on its long side)
    geometry: PatchGeometry | None = None  # model input <-> source pixels (None: a tensor input)
    patch_size: int = 0  # input pixels per side of a clickable first-grid cell
    loaded: Any = field(default=None, repr=False)  # the LoadedModel (a bare model: ModelOnly)


def padded(rows: Sequence[np.ndarray], heads: int) -> np.ndarray:
    """Per block (h_b,) values -> (L, heads) float32, NaN where a block has fewer heads."""
    out = np.full((len(rows), heads), np.nan, dtype=np.float32)
    for b, r in enumerate(rows):
        out[b, : r.shape[0]] = r
    return out


def decode_for_model(image: Any, prep: Any, patch: int) -> tuple[Any, Any]:
    """The source decoded as ``analyze`` decodes it and the model input prepared from it."""
    from vitviz.imaging import load_image, prepare_image
    from vitviz.imaging.loading import full_size
    from vitviz.imaging.preprocess import source_for_display
    from vitviz.imaging.reduction import OVERLAY_MAX_SIDE, model_min_size

    source = load_image(image, max_side=OVERLAY_MAX_SIDE, min_size=model_min_size(prep, patch))
    source = source_for_display(source, prep.channels)
    return source, prepare_image(source, prep, patch, full_size=full_size(source))


@dataclass(frozen=True)
class PreparedInput:
    """One image as a staged kind's analysis runs it: ``x`` (1, C, H, W) on the model's device
    and dtype, and what the window draws it over (None for a tensor given as it is)."""

    x: Tensor
    source: Any = None
    pixels: Any = None
    geometry: Any = None


def prepared_input(model_or_loaded: Any, image: Any, patch: int, what: str) -> PreparedInput:
    """``image`` as ``what`` (e.g. "analyze_pit") takes it: a normalised tensor (C, H, W) or
    (1, C, H, W), or, with a LoadedModel, anything ``load_image`` opens, prepared as the
    checkpoint's preprocessing says (``patch``: the input's stride); TypeError / ValueError in
    one line otherwise."""
    model = getattr(model_or_loaded, "model", model_or_loaded)
    source = pixels = geometry = None
    if not isinstance(image, Tensor):
        prep = getattr(model_or_loaded, "preprocessing", None)
        if prep is None:
            raise TypeError("an image that is not a tensor needs a LoadedModel (its preprocessing)")
        source, prepared = decode_for_model(image, prep, patch)
        image, pixels, geometry = prepared.tensor, prepared.pixels, prepared.geometry
    x = image.unsqueeze(0) if image.ndim == 3 else image
    if x.ndim != 4 or x.shape[0] != 1:
        raise ValueError(f"{what} takes one image (C, H, W), got {tuple(image.shape)}")
    param = next(model.parameters())
    return PreparedInput(x.to(device=param.device, dtype=param.dtype), source, pixels, geometry)


def explained_pass(
    model: nn.Module,
    x: Tensor,
    gradients: bool,
    target_class: int | None,
    **forward: Any,
) -> tuple[Any, Tensor, int, list[Tensor] | None]:
    """``model.forward_explained(x, **forward)`` with, when ``gradients``, ∂y_c/∂A of every
    attention it kept: (its output, logits (C,) (none without a head: the network then gives
    the features the head would read), c (the top class when ``target_class`` is None, -1
    without a head), the gradients (heads, ...) per layer or None)."""
    import torch

    with torch.set_grad_enabled(gradients):
        if gradients:
            x = x.detach().requires_grad_(True)
        out = model.forward_explained(x, **forward)
        logits = out.logits[0] if model.config.num_classes else out.logits[0, :0]
        top = int(logits.argmax()) if logits.numel() else -1
        c = top if target_class is None else int(target_class)
        grads = None
        if gradients:
            if not 0 <= c < logits.shape[0]:
                raise ValueError(f"class {c} out of range for {logits.shape[0]} classes")
            grads = [g[0].detach() for g in torch.autograd.grad(logits[c], out.attentions)]
    return out, logits, c, grads


def method_matrices(
    attentions: Sequence[Tensor], gradients: Sequence[Tensor] | None, method: str, fusion: str
) -> tuple[list[Tensor], str]:
    """Each layer's matrix (N_q, N_k) of ``method`` in float64, from its attention (heads,
    N_q, N_k) and ∂y_c/∂A (the same shape), and the mode the kind's rollout chains them in:
    rollout fuse_h(A) ("rollout"), gradient-rollout (mean_h(A ⊙ ∂y_c/∂A))⁺ ("rollout"),
    relevance mean_h((A ⊙ ∂y_c/∂A)⁺) ("relevance"); ValueError without the gradients."""
    from vitviz.explain.fusion import fuse_heads

    attn = [a.double() for a in attentions]
    if method == "rollout":
        return [fuse_heads(a[None], fusion)[0] for a in attn], "rollout"
    if gradients is None:
        raise ValueError(f"{method} needs the analysis run with gradients=True")
    pairs = zip(attn, [g.double() for g in gradients], strict=True)
    if method == "gradient-rollout":
        return [(a * g).mean(dim=0).clamp_min(0) for a, g in pairs], "rollout"
    return [(a * g).clamp_min(0).mean(dim=0) for a, g in pairs], "relevance"


def own_model(model_or_loaded: Any, networks: type | tuple[type, ...], refusal: str) -> Any:
    """The model ``model_or_loaded`` is (or, a LoadedModel, holds), one of vitviz's own
    ``networks``; TypeError "{refusal}, got {its class}" for another."""
    model = getattr(model_or_loaded, "model", model_or_loaded)
    if not isinstance(model, networks):
        raise TypeError(f"{refusal}, got {type(model).__name__}")
    return model


def pass_fields(
    model_or_loaded: Any, model: nn.Module, given: PreparedInput, logits: Tensor, target_class: int
) -> dict[str, Any]:
    """The fields every staged analysis keeps of its one pass: ``logits`` and ``probs`` (C,),
    ``target_class``, the ``input`` (C, H, W) it ran on and what the window draws it over
    (``pixels``, ``source``, ``geometry``), and ``loaded`` (a bare model: ``ModelOnly``)."""
    return {
        "logits": logits.detach(),
        "probs": logits.detach().softmax(dim=-1),
        "target_class": target_class,
        "input": given.x[0].detach(),
        "pixels": given.pixels,
        "source": given.source,
        "geometry": given.geometry,
        "loaded": model_or_loaded if model_or_loaded is not model else ModelOnly(model),
    }
