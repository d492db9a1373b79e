"""analyze(model, image) -> Analysis: the one entry point of the window, the CLI and notebooks.

One forward pass with attention capture gives logits, every layer's attention, block outputs
and head statistics. Maps are computed on demand from the stored attention; the gradient
methods run their own forward + backward, only when asked, cached per class.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import Tensor

from vitviz import explain
from vitviz.checkpoints import LoadedModel
from vitviz.devices import resolve_device
from vitviz.errors import VitvizError
from vitviz.finite import NonFiniteError as NonFiniteError  # re-exported: analyze raises it
from vitviz.finite import check_finite
from vitviz.imaging import PatchGeometry, Preprocessing, load_image, prepare_image
from vitviz.imaging.loading import full_size
from vitviz.imaging.preprocess import (
    check_channels,
    denormalize,
    input_size_for,
    source_for_display,
)
from vitviz.imaging.reduction import OVERLAY_MAX_SIDE, model_min_size
from vitviz.memory import NotEnoughMemoryError as NotEnoughMemoryError  # re-exported too
from vitviz.memory import check_analysis_memory
from vitviz.model import ViTOutput


class UnsupportedModelError(VitvizError):
    """A model kind this entry point does not explain (e.g. a Swin given to analyze())."""


def require_vit(loaded: LoadedModel) -> None:
    """Refuse, in one line, a model kind analyze() does not take (a Swin)."""
    if getattr(loaded.model, "model_kind", "vit") == "swin":
        raise UnsupportedModelError(
            f"{loaded.name} is a Swin Transformer: vitviz.explain.swin_analysis.analyze_swin "
            "explains it; analyze(), `explain`, `faithfulness` and the window take ViTs for now."
        )


ROLLOUT_CACHE_SIZE = 4  # prepared rollouts kept per analysis (settings × classes)


@dataclass
class Prediction:
    index: int
    name: str
    probability: float
    logit: float


@dataclass
class Analysis:
    """What one image did inside one model. Shapes are for the single image (no batch axis).

    Token layout: [CLS, (dist), (registers...), patches row-major over ``grid``].
    """

    input: Tensor  # (C, H, W) float32, normalised: exactly what the model saw
    pixels: np.ndarray  # (H, W, 3) uint8, the model input before normalisation (gray for C=1)
    geometry: PatchGeometry  # model input <-> source image pixels
    source: Image.Image | None  # the image as loaded (RGB; gray RGB for C=1), None for a tensor
    # (reduced to analyze's max_side on its long side; geometry maps onto this image)
    logits: Tensor  # (C,) float32
    probs: Tensor  # (C,) float32
    class_names: list[str]
    attention: Tensor  # (L, H, N, N) post-softmax, rows = queries (float32 unless asked)
    token_norms: Tensor  # (L, N) float32
    mean_distance: Tensor  # (L, H) pixels of the model input
    entropy: Tensor  # (L, H) nats
    prefix_share: Tensor  # (L, H)
    grid: tuple[int, int]  # (gh, gw)
    num_prefix_tokens: int
    patch_size: int
    device: str
    loaded: LoadedModel | None = field(default=None, repr=False)
    _gradients: dict[int, list[Tensor]] = field(default_factory=dict, repr=False)
    _rollouts: dict[tuple, explain.PreparedRollout] = field(default_factory=dict, repr=False)

    # -- predictions --------------------------------------------------------------------------
    @property
    def num_layers(self) -> int:
        return self.attention.shape[0]

    @property
    def num_heads(self) -> int:
        return self.attention.shape[1]

    @property
    def has_head(self) -> bool:
        return self.logits.numel() > 0 and len(self.class_names) == self.logits.numel()

    @property
    def top_class(self) -> int:
        return int(self.logits.argmax()) if self.has_head else -1

    def top_k(self, k: int = 5) -> list[Prediction]:
        """The k most probable classes, best first."""
        if not self.has_head:
            return []
        k = min(k, self.probs.numel())
        probs, idx = self.probs.topk(k)
        return [
            Prediction(int(i), self.class_names[int(i)], float(p), float(self.logits[i]))
            for p, i in zip(probs, idx, strict=True)
        ]

    # -- queries ------------------------------------------------------------------------------
    def query_token(self, patch: tuple[int, int] | None = None) -> int | None:
        """Token index for a (row, col) patch, or CLS for None (mean of patches without one)."""
        return explain.query_token(patch, self.grid, self.num_prefix_tokens)

    def _layers(self) -> list[Tensor]:
        return [a.float()[None] for a in self.attention]  # L × (1, H, N, N)

    # -- maps (all (gh, gw) float32 unless said) ----------------------------------------------
    def attention_maps(self, layer: int, patch: tuple[int, int] | None = None) -> Tensor:
        """Raw attention of one layer for the query, every head: (H, gh, gw)."""
        a = self.attention[layer].float()[None]
        return explain.attention_maps(
            a, self.grid, self.num_prefix_tokens, self.query_token(patch)
        )[0]

    def all_attention_maps(self, patch: tuple[int, int] | None = None) -> Tensor:
        """Raw attention of every layer and head for the query: (L, H, gh, gw)."""
        a = self.attention.float()  # (L, H, N, N) taken as a batch of L
        return explain.attention_maps(a, self.grid, self.num_prefix_tokens, self.query_token(patch))

    def prefix_attention(self, patch: tuple[int, int] | None = None) -> Tensor:
        """Attention the query gives each prefix token: (L, H, num_prefix)."""
        return explain.prefix_attention(
            self.attention.float(), self.num_prefix_tokens, self.query_token(patch)
        )

    def rollout(
        self,
        patch: tuple[int, int] | None = None,
        fusion: str = "mean",
        heads: Sequence[int] | None = None,
        discard_ratio: float = 0.0,
        start_layer: int = 0,
    ) -> Tensor:
        key = ("rollout", fusion, None if heads is None else tuple(heads), discard_ratio)
        prepared = self._prepared(
            key,
            lambda: explain.prepare_rollout(
                self.attention.float()[:, None], fusion, heads, discard_ratio
            ),
        )
        return self._rollout_map(prepared, patch, start_layer)

    def gradient_rollout(
        self,
        target_class: int | None = None,
        patch: tuple[int, int] | None = None,
        discard_ratio: float = 0.0,
        start_layer: int = 0,
    ) -> Tensor:
        grads = self.gradients(target_class)
        c = self.top_class if target_class is None else int(target_class)
        prepared = self._prepared(
            ("gradient_rollout", c, discard_ratio),
            lambda: explain.prepare_gradient_rollout(
                self.attention.float()[:, None], torch.stack(grads), discard_ratio
            ),
        )
        return self._rollout_map(prepared, patch, start_layer)

    def _prepared(
        self, key: tuple, build: Callable[[], explain.PreparedRollout]
    ) -> explain.PreparedRollout:
        """Layer matrices of a rollout, kept for the next queries (a few settings at a time)."""
        if key not in self._rollouts:
            if len(self._rollouts) >= ROLLOUT_CACHE_SIZE:
                self._rollouts.pop(next(iter(self._rollouts)))
            self._rollouts[key] = build()
        return self._rollouts[key]

    def _rollout_map(
        self, prepared: explain.PreparedRollout, patch: tuple[int, int] | None, start_layer: int
    ) -> Tensor:
        if not 0 <= start_layer < self.num_layers:
            raise ValueError(f"start layer {start_layer} out of range for {self.num_layers} layers")
        return explain.rollout_map(
            prepared, self.grid, self.num_prefix_tokens, self.query_token(patch), start_layer
        )[0]

    def relevance(
        self,
        target_class: int | None = None,
        patch: tuple[int, int] | None = None,
        start_layer: int = 0,
    ) -> Tensor:
        grads = self.gradients(target_class)
        return explain.relevance(
            self._layers(),
            grads,
            self.grid,
            self.num_prefix_tokens,
            self.query_token(patch),
            start_layer,
        )[0]

    def dino_masks(
        self, layer: int = -1, threshold: float = 0.6, patch: tuple[int, int] | None = None
    ) -> Tensor:
        """Per head, the fewest patches holding ``threshold`` of the query's mass: (H, gh, gw)."""
        a = self.attention[layer].float()[None]
        return explain.dino_masks(
            a, self.grid, self.num_prefix_tokens, threshold, self.query_token(patch)
        )[0]

    # -- gradients ----------------------------------------------------------------------------
    def gradients(self, target_class: int | None = None) -> list[Tensor]:
        """G_l = ∂y_c/∂A_l for every layer, L × (1, H, N, N) on the CPU, cached per class."""
        c = self.top_class if target_class is None else int(target_class)
        if not self.has_head:
            raise ValueError(
                "this model has no classification head, so there is no class to "
                "explain; gradient rollout and relevance need one"
            )
        if not 0 <= c < self.logits.numel():
            raise ValueError(
                f"class {c} is out of range: the model has {self.logits.numel()} "
                f"classes (0..{self.logits.numel() - 1})"
            )
        if c not in self._gradients:
            if self.loaded is None:
                raise ValueError("this Analysis has no model attached to compute gradients")
            model = self.loaded.model
            device = next(model.parameters()).device
            check_analysis_memory(model, self.input.shape[-2:], gradient_pass_only=True)
            result = explain.attention_gradients(model, self.input[None].to(device), c)
            self._gradients[c] = [g.float().cpu() for g in result.gradients]
        return self._gradients[c]


def analyze(
    loaded: LoadedModel,
    image: Any,
    *,
    device: str | torch.device | None = None,
    preprocessing: Preprocessing | None = None,
    attention_dtype: torch.dtype = torch.float32,
    gradients: bool = False,
    max_side: int | None = OVERLAY_MAX_SIDE,
) -> Analysis:
    """Run ``loaded``'s model on ``image`` with attention capture.

    ``image``: a path, bytes, PIL image, uint8 array, or an already normalised tensor
    (C, H, W) / (1, C, H, W) (C: the model's in_channels; a 1-channel model sees images as
    grayscale; ValueError when the preprocessing's channels are not the model's). ``device``:
    None keeps the model where it is; "auto", "cpu", "cuda", "mps" move it. Maps are computed
    later, on demand, from the returned Analysis.
    ``gradients=True`` runs this one forward pass with autograd and keeps the top class's
    attention gradients, so gradient rollout and relevance need no second pass.
    ``max_side``: a larger image is decoded reduced to this long side (None: full size), never
    below what the model input needs (``vitviz.imaging.reduction``); the source kept is that.
    """
    require_vit(loaded)
    model = loaded.model
    if device is not None:
        model.to(resolve_device(device))
    model.eval()
    dev = next(model.parameters()).device
    prep = preprocessing or loaded.preprocessing
    patch = model.config.patch_size
    channels = check_channels(prep, getattr(model.config, "in_channels", 3))
    if isinstance(image, Tensor):
        x = image.detach().float()
        x = x[0] if x.ndim == 4 else x
        if x.ndim != 3 or x.shape[0] != channels:
            raise ValueError(
                f"an input tensor must be ({channels}, H, W) or (1, {channels}, H, W) for this "
                f"{channels}-channel model, got {tuple(image.shape)}"
            )
        check_analysis_memory(model, x.shape[-2:], gradients=gradients)
        geometry = PatchGeometry.identity((x.shape[1], x.shape[2]), patch)
        pixels = denormalize(x, prep)
        source = None
    else:
        source = load_image(image, max_side=max_side, min_size=model_min_size(prep, patch))
        source = source_for_display(source, channels)  # gray RGB for 1 channel
        size = input_size_for(prep, (source.height, source.width), patch)
        check_analysis_memory(model, size, gradients=gradients)  # before any big allocation
        prepared = prepare_image(source, prep, patch, full_size=full_size(source))
        x, pixels, geometry = prepared.tensor, prepared.pixels, prepared.geometry
    cached_gradients: dict[int, list[Tensor]] = {}
    if gradients and model.config.num_classes > 0:
        g = explain.attention_gradients(model, x[None].to(dev), None, hidden_states=True)
        out = ViTOutput(g.logits, g.attentions, g.hidden_states, g.grid, g.num_prefix_tokens)
        cached_gradients[int(g.target[0])] = [t.float().cpu() for t in g.gradients]
    else:
        with torch.inference_mode():
            out = model.forward_explained(
                x[None].to(dev), capture_attention=True, hidden_states=True
            )
    with torch.inference_mode():
        logits = out.logits[0].float()
        attn = torch.stack([a[0] for a in out.attentions])  # (L, H, N, N)
        check_finite(x, logits, attn, [g for gs in cached_gradients.values() for g in gs])
        # all layers at once: the (L, H, N, N) stack taken as a batch of L
        P, grid = out.num_prefix_tokens, out.grid
        mean_distance = explain.mean_attention_distance(attn, grid, P, patch)  # (L, H)
        entropy = explain.attention_entropy(attn, P)  # (L, H)
        prefix_share = explain.prefix_share(attn, P)  # (L, H)
        if out.hidden_states:
            norms = explain.token_norms(out.hidden_states)[0]  # (L, N)
        else:  # a model whose block outputs are unknown (model code): zeros
            norms = torch.zeros(attn.shape[0], attn.shape[-1])
    has_head = model.config.num_classes > 0
    probs = logits.softmax(-1) if has_head else torch.empty(0)
    return Analysis(
        input=x.cpu(),
        pixels=pixels,
        geometry=geometry,
        source=source,
        logits=logits.cpu() if has_head else torch.empty(0),
        probs=probs.cpu(),
        class_names=list(loaded.class_names) if has_head else [],
        attention=attn.to("cpu", attention_dtype),
        token_norms=norms.float().cpu(),
        mean_distance=mean_distance.float().cpu(),
        entropy=entropy.float().cpu(),
        prefix_share=prefix_share.float().cpu(),
        grid=out.grid,
        num_prefix_tokens=out.num_prefix_tokens,
        patch_size=patch,
        device=str(dev),
        loaded=loaded,
        _gradients=cached_gradients,
    )
