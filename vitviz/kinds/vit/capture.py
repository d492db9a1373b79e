"""One forward pass over a batch with attention capture, gathered per image on its device.

Each captured layer (B, H, N, N) is consumed as it comes: each image's slice is copied into its
own (L, H, N, N) buffer (in the attention dtype asked for) and the layer is dropped, so the
peak holds the kept attention and one layer, never the captured list and a stacked copy
together. The head statistics are taken there only when the attention is kept in a half type
(from the float32 layer); a float32 attention is kept exactly, and the analysis makes them
from it when they are first read (``vitviz.kinds.vit.head_stats``). Nothing leaves the device
here.

With ``layers`` (the model layers to keep, sorted) only those layers' attention, statistics
and gradients are kept; the forward pass itself is the same (every layer runs as without it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from vitviz import explain
from vitviz.blocks import VisionTransformer, ViTOutput
from vitviz.explain.gradients import GradientProducts, _Products, attention_gradient_products
from vitviz.explain.targets import target_classes
from vitviz.kinds.vit.head_stats import LayerStatistics
from vitviz.kinds.vit.kept_graph import KeptGraph, frozen_parameters
from vitviz.pipeline.memory import USABLE_FRACTION, available_memory


@dataclass
class Captured:
    """What the forward pass left for one image, on the device it ran on."""

    logits: Tensor  # (C,) float32
    attention: Tensor  # (K, H, N, N) in the attention dtype asked for: the K kept layers
    head_stats: Tensor | None  # (3, K, H) float32 (``head_stats.STATISTICS``) taken from the
    # float32 layers when the attention is kept in a half type; None: made from ``attention``
    token_norms: Tensor  # (K, N) float32
    attention_sums: Tensor  # (K,) float32: each layer's sum (finite iff the layer is)
    products: GradientProducts | None  # the gradients of ``target``, reduced (batch 1)
    target: int  # the class the gradients are of (-1: none)
    grid: tuple[int, int]  # (gh, gw)
    num_prefix_tokens: int
    layers: tuple[int, ...] | None = None  # the model layers kept (None: every layer)
    graph: KeptGraph | None = None  # the forward pass's graph, when asked and kept
    hidden: tuple[Tensor, ...] = ()  # every block's output (N, D), for the feature views
    # (DESIGN §5); () for a model whose block outputs are unknown (model code)


def capture_batch(
    model: torch.nn.Module,
    x: Tensor,
    patch_size: int,
    *,
    attention_dtype: torch.dtype = torch.float32,
    gradients: bool = False,
    layers: Sequence[int] | None = None,
    keep_graph: bool = False,
) -> list[Captured]:
    """Run ``model`` on ``x`` (B, C, H, W), already on the model's device, and gather each
    image's attention and token norms (the head statistics too for a half ``attention_dtype``;
    and, with ``gradients``, what the gradient maps need of its top class's attention
    gradients, ``GradientProducts``) there.

    Without gradients, vitviz's own ViT hands each layer over as soon as it is computed
    (``attention_sink``), so only the kept attention and one layer exist at a time.
    ``layers``: keep only these model layers (sorted; None: every layer); with gradients on
    vitviz's own ViT the backward pass then recomputes each block, so the graph never holds
    every layer. ``keep_graph``: for one image on vitviz's own ViT whose graph fits (not
    ``recompute_pays``), the forward pass runs with autograd and its graph is kept
    (``Captured.graph``, ``KeptGraph``): a later target's gradients are one backward pass."""
    B = x.shape[0]
    kept = None if layers is None else tuple(layers)
    own = isinstance(model, VisionTransformer)
    if keep_graph and B == 1 and own and not recompute_pays(model, x):
        return [_capture_keeping_graph(model, x, patch_size, attention_dtype, kept, gradients)]
    if (
        gradients
        and model.config.num_classes > 0
        and ((kept is not None and own) or recompute_pays(model, x))
    ):
        return _capture_with_gradients(model, x, patch_size, attention_dtype, kept)
    if gradients and model.config.num_classes > 0:  # the graph holds every layer: fastest
        g = attention_gradient_products(model, x, None, hidden_states=True, layers=kept)
        collector = _Collector(len(g.attentions), g.grid, g.num_prefix_tokens, patch_size, kept)
        atts: list[Tensor | None] = list(g.attentions)
        logits, hidden, products = g.logits, g.hidden_states, g.products
        targets = [int(t) for t in g.target.tolist()]
        del g
        with torch.inference_mode():
            for layer in range(len(atts)):
                a = atts[layer]
                atts[layer] = None  # the collector's copy is all that is left of it
                assert a is not None
                collector.add(layer, a, attention_dtype)
                del a
            return collector.finish(logits, hidden, products, targets, B)
    grid = _grid_of(model, x, patch_size)
    prefix = int(model.config.num_prefix_tokens)
    collector = _Collector(int(model.config.depth), grid, prefix, patch_size, kept)
    with torch.inference_mode():
        if own:
            out = model.forward_explained(
                x,
                capture_attention=True,
                hidden_states=True,
                attention_sink=lambda layer, a: collector.add(layer, a, attention_dtype),
            )
        else:  # model code: its forward pass lists the layers
            out = model.forward_explained(x, capture_attention=True, hidden_states=True)
            collector = _Collector(len(out.attentions), out.grid, prefix, patch_size, kept)
            layers: list[Tensor | None] = list(out.attentions)
            out = ViTOutput(out.logits, [], list(out.hidden_states), out.grid, prefix)
            for layer in range(len(layers)):
                a = layers[layer]
                layers[layer] = None
                assert a is not None
                collector.add(layer, a, attention_dtype)
                del a
        return collector.finish(out.logits, out.hidden_states, None, [-1] * B, B)


PEAK_LIMIT = 1.5  # × (weights + float32 attention): the most a whole analysis may hold
SMALL_GRAPH = 256 * 2**20  # bytes: a graph this small is kept past PEAK_LIMIT (a tiny model's
# activations outweigh its weights and attention; recomputing would cost a forward pass)


def recompute_pays(model: torch.nn.Module, x: Tensor, attention_kept: bool = False) -> bool:
    """Whether the gradient pass should recompute each block in the backward pass (one more
    forward pass of time) rather than let the graph hold every layer's attention and
    activations: when the latter would take the analysis past PEAK_LIMIT × (weights +
    attention) and is over SMALL_GRAPH, or past the memory free on the device. vitviz's own
    ViT only.
    ``attention_kept``: the analysis's attention is in memory already (a later pass)."""
    if not isinstance(model, VisionTransformer):
        return False
    cfg = model.config
    B, _, h, w = x.shape
    p = cfg.patch_size
    N = cfg.num_prefix_tokens + (h // p) * (w // p)
    L, H, D = cfg.depth, int(getattr(cfg, "layer_heads", cfg.heads)), cfg.dim
    attention = 4 * B * L * H * N * N
    activations = 4 * B * L * N * (8 * D + 2 * cfg.hidden_dim)
    products = attention * (2 / H + 1 / L + 1 / (L * H))
    weights = sum(t.numel() * t.element_size() for t in model.parameters())
    graph = attention + activations + products + 3 * attention / L
    peak = weights + graph + (attention if attention_kept else 0)
    if graph > SMALL_GRAPH and peak > PEAK_LIMIT * (weights + attention):
        return True
    free = available_memory(x.device)
    return free is not None and graph > USABLE_FRACTION * free


def _capture_with_gradients(
    model: VisionTransformer,
    x: Tensor,
    patch_size: int,
    attention_dtype: torch.dtype,
    layers: tuple[int, ...] | None = None,
) -> list[Captured]:
    """One forward pass that keeps each layer's attention as it comes, then one backward pass
    that recomputes each block (activation checkpointing) and reduces each G_l with the kept
    A_l as it is made: the peak holds the kept attention, one block's graph and the products,
    not the graph's copy of every layer's attention and activations."""
    grid = _grid_of(model, x, patch_size)
    prefix = int(model.config.num_prefix_tokens)
    collector = _Collector(int(model.config.depth), grid, prefix, patch_size, layers)

    def kept(layer: int) -> Tensor:  # (B, H, N, N): the views themselves for one image
        i = collector.slot[layer]
        if len(collector.kept) == 1:
            return collector.kept[0][i][None]
        return torch.stack([k[i] for k in collector.kept])

    def keep(layer: int, a: Tensor) -> None:
        collector.add(layer, a, attention_dtype)

    logits, targets, products, hidden = reduced_gradient_pass(
        model, x, None, kept, keep, layers=layers
    )
    with torch.inference_mode():
        return collector.finish(logits, hidden, products, targets.tolist(), x.shape[0])


def reduced_gradient_pass(
    model: VisionTransformer,
    x: Tensor,
    target: int | Tensor | None,
    attention_of: Callable[[int], Tensor],
    on_layer: Callable[[int, Tensor], None] | None = None,
    layers: Sequence[int] | None = None,
) -> tuple[Tensor, Tensor, GradientProducts, list[Tensor]]:
    """Forward and backward for y_c with each block recomputed in the backward pass; each G_l
    is reduced with ``attention_of(l)`` (B, H, N, N) (the attention kept elsewhere, e.g. by
    ``on_layer(l, A_l)``, called in the forward pass) as it is made. Returns the logits, the
    classes, the GradientProducts and the block outputs (detached). ``layers``: only these
    model layers' G_l are reduced (None: every layer)."""
    products = _Products(int(model.config.depth), layers)

    def sink(layer: int, a: Tensor) -> None:
        if on_layer is not None:
            with torch.no_grad():
                on_layer(layer, a.detach())
        if layer not in products.slot:
            return

        def reduce(g: Tensor) -> None:
            products.add(layer, attention_of(layer), g)

        a.register_hook(reduce)

    with torch.enable_grad():
        x = x.detach().requires_grad_(True)
        out = model.forward_explained(
            x, capture_attention=True, hidden_states=True, attention_sink=sink,
            recompute_blocks=True,
        )  # fmt: skip
        classes = target_classes(out.logits, target)
        y = out.logits.gather(1, classes[:, None]).sum()
        torch.autograd.grad(y, x)  # the hooks take each layer's gradient on the way
    hidden = [h.detach() for h in out.hidden_states]
    return out.logits.detach(), classes.detach(), products.done(), hidden


def _capture_keeping_graph(
    model: VisionTransformer,
    x: Tensor,
    patch_size: int,
    attention_dtype: torch.dtype,
    layers: tuple[int, ...] | None,
    gradients: bool,
) -> Captured:
    """One image's forward pass with autograd on the activations alone (the parameters
    frozen): each layer's attention is kept as it comes (its statistics taken without a graph)
    and the graph from the attention to the final tokens is kept; ``gradients``: the top
    class's GradientProducts from one backward pass through it."""
    grid = _grid_of(model, x, patch_size)
    prefix = int(model.config.num_prefix_tokens)
    collector = _Collector(int(model.config.depth), grid, prefix, patch_size, layers)
    in_graph: list[Tensor] = []

    def sink(layer: int, a: Tensor) -> None:
        in_graph.append(a)
        with torch.no_grad():
            collector.add(layer, a.detach(), attention_dtype)

    with torch.enable_grad(), frozen_parameters(model):
        x = x.detach().requires_grad_(True)  # the activations' graph, from the input on
        tokens, _, hidden, _ = model.forward_features(
            x, capture_attention=True, hidden_states=True, attention_sink=sink
        )
        logits = model.forward_head(tokens)
        graph = KeptGraph(in_graph, tokens)
        products, target = None, -1
        if gradients and model.config.num_classes > 0:
            target = int(logits[0].detach().argmax())
            kept = collector.layers
            grads = graph.gradients(logits[0, target], kept)
            products = GradientProducts.of(
                [in_graph[layer].detach() for layer in kept], grads, layers, len(in_graph)
            )
            del grads
    hidden = [h.detach() for h in hidden]
    with torch.inference_mode():
        (cap,) = collector.finish(logits.detach(), hidden, products, [target], 1)
    cap.graph = graph
    return cap


def _grid_of(model: torch.nn.Module, x: Tensor, patch_size: int) -> tuple[int, int]:
    return (x.shape[-2] // patch_size, x.shape[-1] // patch_size)


class _Collector:
    """Takes each captured layer (B, H, N, N) as it comes: each image's slice copied into that
    image's (K, H, N, N) buffer in the kept dtype, its sum (the finiteness check) and, for a
    half kept dtype, its head statistics; a layer that is not among ``layers`` (the model
    layers kept, sorted; None: all ``depth``) is passed over."""

    def __init__(
        self,
        depth: int,
        grid: tuple[int, int],
        prefix: int,
        patch_size: int,
        layers: tuple[int, ...] | None = None,
    ) -> None:
        self.layers = tuple(range(depth)) if layers is None else layers
        self.partial = layers
        self.slot = {layer: i for i, layer in enumerate(self.layers)}
        self.L, self.grid, self.prefix, self.patch = len(self.layers), grid, prefix, patch_size
        self.kept: list[Tensor] = []
        self.stats: Tensor | None = None  # (3, K, B, H) for a half kept dtype (STATISTICS)
        self.sums: Tensor | None = None  # (K, B)
        self.statistics: LayerStatistics | None = None  # for a half kept dtype

    def add(self, layer: int, a: Tensor, dtype: torch.dtype) -> None:
        if layer not in self.slot:
            return
        layer = self.slot[layer]
        B, H, N, _ = a.shape
        if not self.kept:
            self.kept = [
                torch.empty((self.L, H, N, N), dtype=dtype, device=a.device) for _ in range(B)
            ]
            self.sums = torch.empty((self.L, B), dtype=torch.float32, device=a.device)
            if dtype != torch.float32:  # the kept copy is rounded: take them from this one
                self.stats = torch.empty((3, self.L, B, H), dtype=torch.float32, device=a.device)
                self.statistics = LayerStatistics(self.grid, self.prefix, self.patch)
        assert self.sums is not None
        af = a.float()  # (B, H, N, N); no copy when the model computed float32
        if self.stats is not None:
            assert self.statistics is not None
            self.stats[:, layer] = self.statistics(af)
        self.sums[layer] = af.sum(dim=(1, 2, 3))
        for i in range(B):
            self.kept[i][layer].copy_(a[i])

    def finish(
        self,
        logits: Tensor,
        hidden: list[Tensor],
        products: GradientProducts | None,
        targets: list[int],
        batch: int,
    ) -> list[Captured]:
        stats, sums = self.stats, self.sums
        assert sums is not None, "the model captured no attention"
        N = self.kept[0].shape[-1]
        dev = self.kept[0].device
        # (B, L, N); zeros for a model whose block outputs are unknown (model code)
        if hidden:
            norms = explain.token_norms([hidden[layer] for layer in self.layers]).float()
        else:
            norms = torch.zeros((batch, self.L, N), device=dev)
        blocks = _per_image(hidden, batch)
        hidden.clear()
        if products is None:
            per_image: list[GradientProducts | None] = [None] * batch
        elif batch == 1:
            per_image = [products]
        else:
            per_image = [products.image(i) for i in range(batch)]
        return [
            Captured(
                logits=logits[i].float(),
                attention=self.kept[i],
                head_stats=None if stats is None else stats[:, :, i],
                token_norms=norms[i],
                attention_sums=sums[:, i],
                products=per_image[i],
                target=targets[i],
                grid=self.grid,
                num_prefix_tokens=self.prefix,
                layers=self.partial,
                hidden=blocks[i],
            )
            for i in range(batch)
        ]


def _per_image(hidden: list[Tensor], batch: int) -> list[tuple[Tensor, ...]]:
    """Each image's block outputs (N, D) from L × (B, N, D), detached: views for one image, a
    copy each in a batch (a view would keep the whole batch's tensors alive)."""
    if batch == 1:
        return [tuple(h[0].detach() for h in hidden)]
    return [tuple(h[i].detach().clone() for h in hidden) for i in range(batch)]
