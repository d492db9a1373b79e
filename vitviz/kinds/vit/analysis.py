"""The ViT's analysis (also the token-layout kinds', CaiT, XCiT and CLIP's): ``analyze_vit``
(model, image) -> Analysis, what ``vitviz.pipeline.analysis.analyze`` runs for them.

One forward pass with attention capture gives logits, every layer's attention and block
outputs; the head statistics are made from the kept attention when first read
(``vitviz.kinds.vit.head_stats``). Maps are computed on demand from the stored attention; the
gradient methods run their own forward + backward, only when asked, cached per class (one
backward pass alone when the analysis kept its forward pass's graph, ``keep_graph``: a CLIP's
new prompts).

The analysis lives on its device (DESIGN §7): attention, gradients, prepared rollouts and
relevance stay where the forward pass ran. What crosses to the host is what is shown: the
logits, the (L, H) head statistics, and each map asked for ((gh, gw), or (L, H, gh, gw) for the
head grid); the (L, H, N, N) attention only for export (``attention_numpy``).

``analyze(..., layers=...)`` keeps only some layers (``vitviz.core.layers``): the forward pass and
logits are the same, ``attention`` and the per-layer statistics hold the K kept layers in order
(``layer_indices`` names them), the maps of one layer take the model's layer index, and the
maps that need every layer (rollout, gradient rollout, relevance) refuse in one line.
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
from vitviz.blocks import VisionTransformer
from vitviz.checkpoints import LoadedModel
from vitviz.core.devices import resolve_device
from vitviz.core.finite import check_finite
from vitviz.core.layers import LayersNotKeptError, LayerSpec, layers_text, parse_layers
from vitviz.explain.gradients import GradientProducts
from vitviz.explain.tokens import patch_part
from vitviz.imaging import PatchGeometry, Preprocessing, load_image, prepare_image
from vitviz.imaging.loading import full_size
from vitviz.imaging.preprocess import (
    check_channels,
    denormalize,
    input_size_for,
    source_for_display,
)
from vitviz.imaging.reduction import OVERLAY_MAX_SIDE, model_min_size
from vitviz.kinds.vit.capture import Captured, capture_batch, recompute_pays, reduced_gradient_pass
from vitviz.kinds.vit.head_stats import HeadStats
from vitviz.kinds.vit.kept_graph import KeptGraph, frozen_parameters
from vitviz.kinds.vit.memory import check_analysis_memory
from vitviz.pipeline.analysis import UnsupportedModelError
from vitviz.pipeline.attention_dtype import (
    ATTENTION_DTYPES,
    ATTENTION_PRECISION,
    attention_precision_text,
)


def require_patch_grid(loaded: LoadedModel) -> None:
    """Refuse, in one line, a model without the ViT's one grid of patch tokens (e.g. a Swin)
    given to the ViT's own analysis."""
    from vitviz.blocks.protocol import ExplainableModel

    if not isinstance(loaded.model, ExplainableModel):
        label = loaded.kind.label
        raise UnsupportedModelError(
            f"{loaded.name} is a {label}: the ViT's batched analysis takes one grid of patch "
            "tokens; vitviz.pipeline.analysis.analyze explains it through its kind"
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
    L below is the number of layers kept: the model's, unless ``layers`` names fewer.
    """

    input: Tensor  # (C, H, W) float32, normalised: exactly what the model saw
    pixels: np.ndarray  # (H, W, 3) uint8, the model input before normalisation (gray for C=1)
    geometry: PatchGeometry  # model input <-> source image pixels
    source: Image.Image | None  # the image as loaded (RGB; gray RGB for C=1), None for a tensor
    # (reduced to analyze's max_side on its long side; geometry maps onto this image)
    logits: Tensor  # (C,) float32
    probs: Tensor  # (C,) float32
    class_names: list[str]
    attention: Tensor  # (L, H, N, N) post-softmax, rows = queries (float32 unless asked);
    # on ``device``, where the forward pass ran
    token_norms: Tensor  # (L, N) float32 on the host
    head_stats: HeadStats = field(repr=False)  # mean_distance, entropy, prefix_share below:
    # (3, L, H) float32 on the host, made from ``attention`` when first read (float32 kept)
    grid: tuple[int, int]  # (gh, gw)
    num_prefix_tokens: int
    patch_size: int
    device: str
    loaded: LoadedModel | None = field(default=None, repr=False)
    layers: tuple[int, ...] | None = None  # the model layers of attention's rows (None: all)
    depth: int | None = None  # the model's layers (None: as many as attention holds)
    kind: str = "vit"  # the model kind (vitviz.kinds)
    graph: KeptGraph | None = field(default=None, repr=False)  # the capture pass's graph, kept
    # when asked (``keep_graph``): a new target's gradients are one backward pass through it
    block_outputs: tuple[Tensor, ...] = field(default=(), repr=False)  # every block's output
    # (N, D) on ``device``, from the capture pass, for the feature views (DESIGN §5)
    _gradients: dict[int, list[Tensor]] = field(default_factory=dict, repr=False)
    _products: dict[int, GradientProducts] = field(default_factory=dict, repr=False)
    _rollouts: dict[tuple, Any] = field(default_factory=dict, repr=False)

    # -- head statistics: (L, H) float32 on the host (``vitviz.kinds.vit.head_stats``) -------
    @property
    def mean_distance(self) -> Tensor:
        """(L, H) mean attention distance, pixels of the model input."""
        return self.head_stats.values[0]

    @mean_distance.setter
    def mean_distance(self, value: Tensor) -> None:
        self.head_stats = self.head_stats.replaced(0, value)

    @property
    def entropy(self) -> Tensor:
        """(L, H) mean entropy of the patch queries' rows, nats."""
        return self.head_stats.values[1]

    @entropy.setter
    def entropy(self, value: Tensor) -> None:
        self.head_stats = self.head_stats.replaced(1, value)

    @property
    def prefix_share(self) -> Tensor:
        """(L, H) mean share of the patch queries' attention that goes to prefix tokens."""
        return self.head_stats.values[2]

    @prefix_share.setter
    def prefix_share(self, value: Tensor) -> None:
        self.head_stats = self.head_stats.replaced(2, value)

    @property
    def attention_dtype(self) -> torch.dtype:
        return self.attention.dtype

    @property
    def attention_precision(self) -> str:
        """What the attention's dtype costs (one line, for the info)."""
        return attention_precision_text(self.attention.dtype)

    # -- host copies: what is shown or exported ---------------------------------------------
    def attention_numpy(self) -> np.ndarray:
        """The whole (L, H, N, N) attention as float32 on the host (export only: it is big)."""
        return self.attention.cpu().float().numpy()

    def host_query_maps(
        self, patch: tuple[int, int] | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The query's raw maps on the host, float32: head maps (L, H, gh, gw), their mean over
        heads (L, gh, gw) and the attention given to each prefix token (L, H, num_prefix).
        Computed where the attention is; only these cross."""
        rows = self._query_rows(patch)  # (L, H, N) float32 on the device
        head = patch_part(rows, self.grid, self.num_prefix_tokens)
        out = (
            torch.cat(
                [
                    head.flatten(),
                    head.mean(dim=1).flatten(),
                    rows[..., : self.num_prefix_tokens].flatten(),
                ]
            )
            .cpu()
            .numpy()
        )  # one transfer
        L, H = rows.shape[:2]
        gh, gw = self.grid
        n1, n2 = L * H * gh * gw, L * gh * gw
        return (
            out[:n1].reshape(L, H, gh, gw),
            out[n1 : n1 + n2].reshape(L, gh, gw),
            out[n1 + n2 :].reshape(L, H, self.num_prefix_tokens),
        )

    def _query_rows(self, patch: tuple[int, int] | None) -> Tensor:
        """Row q of every layer and head, float32 on the device: (L, H, N) (without prefix
        tokens and no patch: the mean of the patch queries' rows)."""
        q = self.query_token(patch)
        if q is not None:
            return self.attention[:, :, q, :].float()
        P = self.num_prefix_tokens
        return torch.stack([a[:, P:, :].float().mean(dim=1) for a in self.attention])

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

    # -- layers kept ------------------------------------------------------------------------
    @property
    def layer_indices(self) -> tuple[int, ...]:
        """The model layer of each row of ``attention`` and of the statistics, in order."""
        return tuple(range(self.num_layers)) if self.layers is None else self.layers

    @property
    def model_layers(self) -> int:
        """How many layers the model has (``num_layers`` counts those kept)."""
        return self.depth if self.depth is not None else self.num_layers

    @property
    def all_layers_kept(self) -> bool:
        return self.layers is None or len(self.layers) == self.model_layers

    def layers_kept_text(self) -> str:
        """'layers 9-11 of 12' or 'all 12 layers'."""
        if self.all_layers_kept:
            return f"all {self.model_layers} layers"
        return f"layers {layers_text(self.layer_indices)} of {self.model_layers}"

    def layer_row(self, layer: int) -> int:
        """The row of ``attention`` that holds model layer ``layer`` (-1: the last kept; other
        negative layers count from the model's end, -2 is layer L-2); LayersNotKeptError naming
        the kept layers for one that was not kept."""
        if self.layers is None:
            return layer
        if layer == -1:
            return self.num_layers - 1
        if layer < 0:
            layer += self.model_layers
        if layer in self.layers:
            return self.layers.index(layer)
        raise LayersNotKeptError(
            f"layer {layer} was not kept: this analysis holds {self.layers_kept_text()}"
        )

    def require_every_layer(self, what: str) -> None:
        """LayersNotKeptError naming the missing layers unless every layer was kept."""
        if self.all_layers_kept:
            return
        missing = [i for i in range(self.model_layers) if i not in self.layer_indices]
        raise LayersNotKeptError(
            f"{what} needs every layer's attention, but this analysis kept only "
            f"{self.layers_kept_text()} (missing {layers_text(missing)}); analyse again "
            f"keeping every layer"
        )

    # -- queries ------------------------------------------------------------------------------
    def query_token(self, patch: tuple[int, int] | None = None) -> int | None:
        """Token index for a (row, col) patch, or CLS for None (mean of patches without one)."""
        return explain.query_token(patch, self.grid, self.num_prefix_tokens)

    def _layers(self) -> Sequence[Tensor]:
        """L × (1, H, N, N) float32, each made when read (a half-precision attention is never
        copied to float32 all at once)."""
        return _Float32Layers(self.attention)

    # -- maps: (gh, gw) float32 on the host unless said; computed on the device ---------------
    def attention_maps(self, layer: int, patch: tuple[int, int] | None = None) -> Tensor:
        """Raw attention of one layer for the query, every head: (H, gh, gw). ``layer``: the
        model's layer index (-1: the last kept)."""
        a = self.attention[self.layer_row(layer)].float()[None]
        maps = explain.attention_maps(a, self.grid, self.num_prefix_tokens, self.query_token(patch))
        return maps[0].cpu()

    def all_attention_maps(self, patch: tuple[int, int] | None = None) -> Tensor:
        """Raw attention of every kept layer and head for the query: (L, H, gh, gw)."""
        rows = self._query_rows(patch)
        return patch_part(rows, self.grid, self.num_prefix_tokens).cpu()

    def prefix_attention(self, patch: tuple[int, int] | None = None) -> Tensor:
        """Attention the query gives each prefix token: (L, H, num_prefix)."""
        return self._query_rows(patch)[..., : self.num_prefix_tokens].cpu()

    def rollout(
        self,
        patch: tuple[int, int] | None = None,
        fusion: str = "mean",
        heads: Sequence[int] | None = None,
        discard_ratio: float = 0.0,
        start_layer: int = 0,
    ) -> Tensor:
        self.require_every_layer("attention rollout")
        prepared = self._rollout_prepared(fusion, heads, discard_ratio)
        return self._rollout_map(prepared, patch, start_layer)

    def _rollout_prepared(
        self, fusion: str, heads: Sequence[int] | None, discard_ratio: float
    ) -> explain.PreparedRollout:
        """Attention rollout's layer matrices Ã_l for these settings (kept for the next)."""
        key = ("rollout", fusion, None if heads is None else tuple(heads), discard_ratio)

        def build() -> explain.PreparedRollout:
            if self.attention.dtype == torch.float32:  # a view: fused without a copy of A
                return explain.prepare_rollout(
                    self.attention[:, None], fusion, heads, discard_ratio
                )
            fused = [explain.fuse_heads(a.float()[None], fusion, heads) for a in self.attention]
            return explain.PreparedRollout(fused, discard_ratio)

        return self._prepared(key, build)

    def gradient_rollout(
        self,
        target_class: int | None = None,
        patch: tuple[int, int] | None = None,
        discard_ratio: float = 0.0,
        start_layer: int = 0,
    ) -> Tensor:
        self.require_every_layer("gradient rollout")
        prepared = self._gradient_rollout_prepared(self._target(target_class), discard_ratio)
        return self._rollout_map(prepared, patch, start_layer)

    def _gradient_rollout_prepared(self, c: int, discard_ratio: float) -> explain.PreparedRollout:
        """Gradient rollout's layer matrices for class ``c`` (kept for the next queries)."""
        products = self.gradient_products(c)
        return self._prepared(  # Â_l = (mean_h(A_l ⊙ G_l))⁺, kept from the gradient pass
            ("gradient_rollout", c, discard_ratio),
            lambda: explain.PreparedRollout(products.weighted.clamp_min(0), discard_ratio),
        )

    def _prepared(self, key: tuple, build: Callable[[], Any]) -> Any:
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
        )[0].cpu()

    def relevance(
        self,
        target_class: int | None = None,
        patch: tuple[int, int] | None = None,
        start_layer: int = 0,
    ) -> Tensor:
        self.require_every_layer("relevance")
        products = self.gradient_products(target_class)  # Ā_l kept from the gradient pass
        q = self.query_token(patch)
        return explain.prepared_relevance_map(
            products.positive, self.grid, self.num_prefix_tokens, q, start_layer
        )[0].cpu()

    def dino_masks(
        self, layer: int = -1, threshold: float = 0.6, patch: tuple[int, int] | None = None
    ) -> Tensor:
        """Per head, the fewest patches holding ``threshold`` of the query's mass: (H, gh, gw)."""
        a = self.attention[self.layer_row(layer)].float()[None]
        return explain.dino_masks(
            a, self.grid, self.num_prefix_tokens, threshold, self.query_token(patch)
        )[0].cpu()

    # -- gradients ----------------------------------------------------------------------------
    def _target(self, target_class: int | None) -> int:
        """The class to explain (None: the top one), checked."""
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
        return c

    def _model_and_input(self) -> tuple[Any, Tensor]:
        if self.loaded is None:
            raise ValueError("this Analysis has no model attached to compute gradients")
        model = self.loaded.model
        return model, self.input[None].to(next(model.parameters()).device)

    def gradient_products(self, target_class: int | None = None) -> GradientProducts:
        """What the gradient maps need of G_l = ∂y_c/∂A_l (``GradientProducts``, batch 1), on
        the analysis's device, cached per class: from the analysis's own pass for its top
        class, from one backward pass through the kept graph (``graph``), else from a gradient
        pass that reduces each G_l as it is made."""
        c = self._target(target_class)
        if c not in self._products:
            if self.graph is not None:
                self._products[c] = self._graph_products(c)
            elif c in self._gradients:
                grads = self._gradients[c]
                self._products[c] = GradientProducts.of(
                    self._layers(), grads, self.layers, self.model_layers
                )
            else:
                model, x = self._model_and_input()
                self._check_gradient_pass(model)
                partial = self.layers is not None and isinstance(model, VisionTransformer)
                if partial or recompute_pays(model, x, attention_kept=True):  # kept attention
                    self._products[c] = reduced_gradient_pass(
                        model,
                        x,
                        c,
                        lambda layer: self.attention[self.layer_row(layer)][None],
                        layers=self.layers,
                    )[2]
                else:
                    self._products[c] = explain.attention_gradient_products(
                        model, x, c, layers=self.layers
                    ).products
        return self._products[c]

    def _graph_gradients(self, c: int) -> list[Tensor]:
        """G_l of y_c for every kept layer (K × (1, H, N, N)) from the kept graph: the head run
        again on its final tokens (the current head: a CLIP's prompts as they are now), then
        one backward pass through the blocks."""
        assert self.graph is not None and self.loaded is not None
        model = self.loaded.model
        with torch.enable_grad(), frozen_parameters(model):
            y = model.forward_head(self.graph.tokens)[0, c]
            return self.graph.gradients(y, self.layer_indices)

    def _graph_products(self, c: int) -> GradientProducts:
        """GradientProducts of y_c from the kept graph (``_graph_gradients``)."""
        assert self.graph is not None
        grads = self._graph_gradients(c)
        atts = [self.graph.attentions[layer].detach() for layer in self.layer_indices]
        return GradientProducts.of(atts, grads, self.layers, self.model_layers)

    def _check_gradient_pass(self, model: Any, every_layer: bool = False) -> None:
        """Refuse a later gradient pass that would not fit; ``every_layer``: the pass makes
        every layer's gradients whatever the analysis kept (``gradients``)."""
        kept = None if self.layers is None or every_layer else len(self.layers)
        check_analysis_memory(model, self.input.shape[-2:], gradient_pass_only=True, layers=kept)

    def gradients(self, target_class: int | None = None) -> list[Tensor]:
        """G_l = ∂y_c/∂A_l for every kept layer, L × (1, H, N, N) float32 on the analysis's
        device, cached per class. As big as the attention: the maps don't need them (they use
        ``gradient_products``); asked for, they take a gradient pass of their own."""
        c = self._target(target_class)
        if c not in self._gradients and self.graph is not None:
            self._gradients[c] = [g.float() for g in self._graph_gradients(c)]
        if c not in self._gradients:
            model, x = self._model_and_input()
            self._check_gradient_pass(model, every_layer=True)
            result = explain.attention_gradients(model, x, c)
            self._gradients[c] = [result.gradients[i].float() for i in self.layer_indices]
            del result
        return self._gradients[c]


class _Float32Layers(Sequence[Tensor]):
    """The layers of an (L, H, N, N) attention as L × (1, H, N, N) float32, made on access."""

    def __init__(self, attention: Tensor) -> None:
        self.attention = attention

    def __len__(self) -> int:
        return self.attention.shape[0]

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return self.attention[i].float()[None]


@dataclass
class _Input:
    """One image made ready for the model, on the host."""

    x: Tensor  # (C, H, W) float32, normalised
    pixels: np.ndarray  # (H, W, 3) uint8
    geometry: PatchGeometry
    source: Image.Image | None


def _setup(
    loaded: LoadedModel,
    device: str | torch.device | None,
    preprocessing: Preprocessing | None,
    attention_dtype: torch.dtype,
) -> tuple[Any, torch.device, Preprocessing, int]:
    """The model in eval mode on its device, the preprocessing and the model's channels."""
    require_patch_grid(loaded)
    if attention_dtype not in ATTENTION_PRECISION:
        kept = ", ".join(ATTENTION_DTYPES)
        raise ValueError(f"attention can be kept as {kept}, not {attention_dtype}")
    model = loaded.model
    if device is not None:
        model.to(resolve_device(device))
    if any(m.training for m in model.modules()):  # eval() alone sets every module's flag
        model.eval()
    dev = next(model.parameters()).device
    prep = preprocessing or loaded.preprocessing
    channels = check_channels(prep, getattr(model.config, "in_channels", 3))
    return model, dev, prep, channels


def _prepare(
    image: Any,
    prep: Preprocessing,
    channels: int,
    patch: int,
    max_side: int | None,
    plan: Callable[[tuple[int, int]], object],
) -> _Input:
    """Decode and preprocess ``image`` (see ``analyze``); ``plan(size)`` runs before anything
    big is allocated (the memory check)."""
    if isinstance(image, Tensor):
        x = image.detach().float().cpu()
        x = x[0] if x.ndim == 4 else x
        if x.ndim != 3 or x.shape[0] != channels:
            raise ValueError(
                f"an input tensor must be ({channels}, H, W) or (1, {channels}, H, W) for this "
                f"{channels}-channel model, got {tuple(image.shape)}"
            )
        plan((x.shape[1], x.shape[2]))
        geometry = PatchGeometry.identity((x.shape[1], x.shape[2]), patch)
        return _Input(x, denormalize(x, prep), geometry, None)
    source = load_image(image, max_side=max_side, min_size=model_min_size(prep, patch))
    source = source_for_display(source, channels)  # gray RGB for 1 channel
    plan(input_size_for(prep, (source.height, source.width), patch))  # before any big allocation
    prepared = prepare_image(source, prep, patch, full_size=full_size(source))
    return _Input(prepared.tensor, prepared.pixels, prepared.geometry, source)


def _analysis(loaded: LoadedModel, inp: _Input, cap: Captured, patch: int, dev: Any) -> Analysis:
    """An Analysis from one image's capture: small results to the host, the rest stays."""
    has_head = loaded.model.config.num_classes > 0
    products = cap.products
    flags = []  # NaN and infinity survive these sums and maxima
    if products is not None:
        peaks = [products.weighted.abs().amax()]
        if products.last is not None:  # None: the last layer was not kept
            peaks.append(products.last.abs().amax())
        flags = [torch.stack(peaks)]
    # one sum of the layers' sums (each at most H·N): finite iff every layer is
    check_finite(inp.x, cap.logits, cap.attention_sums[None], flags)
    stats = [] if cap.head_stats is None else [cap.head_stats.flatten()]
    small = torch.cat(  # one device -> host transfer for the numbers shown
        [cap.logits, cap.token_norms.flatten(), *stats]
    ).cpu()  # fmt: skip
    C, LN = cap.logits.numel(), cap.token_norms.numel()
    logits = small[:C]
    if cap.head_stats is None:  # the float32 attention kept: made from it when first read
        head_stats = HeadStats(None, cap.attention, cap.grid, cap.num_prefix_tokens, patch)
    else:
        head_stats = HeadStats.given(small[C + LN :].reshape(cap.head_stats.shape))
    analysis = Analysis(
        input=inp.x,
        pixels=inp.pixels,
        geometry=inp.geometry,
        source=inp.source,
        logits=logits if has_head else torch.empty(0),
        probs=logits.softmax(-1) if has_head else torch.empty(0),
        class_names=list(loaded.class_names) if has_head else [],
        attention=cap.attention,
        token_norms=small[C : C + LN].reshape(cap.token_norms.shape),
        head_stats=head_stats,
        grid=cap.grid,
        num_prefix_tokens=cap.num_prefix_tokens,
        patch_size=patch,
        device=str(dev),
        loaded=loaded,
        layers=cap.layers,
        depth=int(loaded.model.config.depth),
        kind=loaded.kind.name,  # a ViT's, or a kind whose network is a ViT (a CLIP tower)
        graph=cap.graph,
        block_outputs=cap.hidden,
        _products={cap.target: products} if products is not None else {},
    )
    return loaded.kind.finish_analysis(analysis)


def analyze_vit(
    loaded: LoadedModel,
    image: Any,
    *,
    device: str | torch.device | None = None,
    preprocessing: Preprocessing | None = None,
    attention_dtype: torch.dtype = torch.float32,
    gradients: bool = False,
    max_side: int | None = OVERLAY_MAX_SIDE,
    layers: LayerSpec = None,
    keep_graph: bool = False,
) -> Analysis:
    """Run ``loaded``'s ViT on ``image`` with attention capture (the ViT kind's ``analyze``).

    ``image``: a path, bytes, PIL image, uint8 array, or an already normalised tensor
    (C, H, W) / (1, C, H, W) (C: the model's in_channels; a 1-channel model sees images as
    grayscale; ValueError when the preprocessing's channels are not the model's). ``device``:
    None keeps the model where it is; "auto", "cpu", "cuda", "mps" move it. Maps are computed
    later, on demand, from the returned Analysis, on that device.
    ``attention_dtype``: float32, or float16 / bfloat16 to keep the attention in half the
    memory (``ATTENTION_PRECISION`` states what each costs; maps are computed in float32).
    ``gradients=True`` runs this one forward pass with autograd and keeps the top class's
    attention gradients, so gradient rollout and relevance need no second pass.
    ``max_side``: a larger image is decoded reduced to this long side (None: full size), never
    below what the model input needs (``vitviz.imaging.reduction``); the source kept is that.
    ``layers``: keep only these layers' attention (and gradients): 0-based indices, or text
    such as "9,10,11" or "last:4" (``vitviz.core.layers``); None keeps every layer. The forward pass
    and the logits are unchanged; rollout, gradient rollout and relevance then refuse.
    ``keep_graph``: the forward pass runs with autograd on the activations and the analysis
    keeps its graph (``Analysis.graph``, when it fits: ``capture_batch``), so a new target's
    gradients (a CLIP's new prompt) are one backward pass, not a forward and a backward.
    """
    model, dev, prep, channels = _setup(loaded, device, preprocessing, attention_dtype)
    patch = model.config.patch_size
    kept = parse_layers(layers, int(model.config.depth))

    def plan(size: tuple[int, int]) -> object:
        return check_analysis_memory(
            model,
            size,
            gradients=gradients,
            attention_dtype=attention_dtype,
            layers=None if kept is None else len(kept),
        )

    inp = _prepare(image, prep, channels, patch, max_side, plan)
    (cap,) = capture_batch(
        model,
        inp.x[None].to(dev),
        patch,
        attention_dtype=attention_dtype,
        gradients=gradients,
        layers=kept,
        keep_graph=keep_graph,
    )
    return _analysis(loaded, inp, cap, patch, dev)
