"""G_l = ∂y_c/∂A_l: the gradient of a class logit with respect to each layer's attention."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from vitviz.blocks.vit import VisionTransformer
from vitviz.explain.targets import target_classes


@dataclass
class AttentionGradients:
    logits: Tensor  # (B, C), detached
    attentions: list[Tensor]  # L × (B, H, N, N), detached
    gradients: list[Tensor]  # L × (B, H, N, N); gradients[l] pairs with attentions[l]
    target: Tensor  # (B,) long, the class c of each image
    hidden_states: list[Tensor] = field(default_factory=list)  # L × (B, N, D) if asked, detached
    grid: tuple[int, int] = (0, 0)  # (gh, gw)
    num_prefix_tokens: int = 0


def attention_gradients(
    model: VisionTransformer,
    x: Tensor,
    target: int | Tensor | None = None,
    hidden_states: bool = False,
) -> AttentionGradients:
    """One forward pass with captured attention and one backward pass for logit y_c.

    x: (B, C, H, W). ``target`` is a class index, a (B,) tensor of them, or None for the top
    prediction of each image. Only the attention gradients are computed (no weight gradients).
    """
    if model.config.num_classes == 0:
        raise ValueError("this model has no classification head: gradient methods need one")
    with torch.enable_grad():
        x = x.detach().requires_grad_(True)  # makes the graph exist even for frozen weights
        out = model.forward_explained(x, capture_attention=True, hidden_states=hidden_states)
        logits = out.logits
        B, C = logits.shape
        if target is None:
            target_t = logits.detach().argmax(dim=1)
        else:
            target_t = torch.as_tensor(target, device=logits.device).long().reshape(-1)
            if target_t.numel() == 1:
                target_t = target_t.expand(B)
            if target_t.numel() != B:
                raise ValueError(f"{target_t.numel()} target classes for a batch of {B} images")
            if target_t.min() < 0 or target_t.max() >= C:
                raise ValueError(
                    f"class index out of range: the model has {C} classes (0..{C - 1})"
                )
        y = logits.gather(1, target_t[:, None]).sum()
        grads = torch.autograd.grad(y, out.attentions)
    return AttentionGradients(
        logits=logits.detach(),
        attentions=[a.detach() for a in out.attentions],
        gradients=[g.detach() for g in grads],
        target=target_t.detach(),
        hidden_states=[h.detach() for h in out.hidden_states],
        grid=out.grid,
        num_prefix_tokens=out.num_prefix_tokens,
    )


@dataclass
class GradientProducts:
    """What the gradient maps need of G_l = ∂y_c/∂A_l, reduced with A_l layer by layer as the
    backward pass makes each G_l, so the L full gradients are never all kept (about
    (2/H + 1/L + 1/(L·H)) of the attention's memory instead of all of it).

    Of an analysis that keeps only some layers (``layers``), the per-layer products are those
    layers' (K of them, in order) and ``grad_sam`` sums only over them (the maps that need every
    layer refuse such an analysis); ``last`` is None unless the model's last layer is kept."""

    weighted: Tensor  # (K, B, N, N) mean_h(A_l ⊙ G_l): gradient rollout takes its positive part
    positive: Tensor  # (K, B, N, N) mean_h((G_l ⊙ A_l)⁺): relevance's Ā_l
    grad_sam: Tensor  # (B, N, N) mean_{l,h}(G_l⁺ ⊙ A_l): Grad-SAM before the query's row
    last: Tensor | None  # (B, H, N, N) G_L of the last layer: Grad-CAM on attention
    layers: tuple[int, ...] | None = None  # the model layers of ``weighted`` (None: every one)

    def image(self, i: int) -> GradientProducts:
        """Image ``i``'s products (batch axis of 1), copied so the batch's can be freed."""
        return GradientProducts(
            self.weighted[:, i : i + 1].clone(),
            self.positive[:, i : i + 1].clone(),
            self.grad_sam[i : i + 1].clone(),
            None if self.last is None else self.last[i : i + 1].clone(),
            self.layers,
        )

    @classmethod
    def of(
        cls,
        attentions: Sequence[Tensor],
        gradients: Sequence[Tensor],
        layers: Sequence[int] | None = None,
        depth: int | None = None,
    ) -> GradientProducts:
        """From K × (B, H, N, N) attention and gradients (a layer at a time): every layer, or
        the model layers ``layers`` of a ``depth``-layer model."""
        acc = _Products(depth if depth is not None else len(attentions), layers)
        kept = acc.layers
        for layer, a, g in zip(kept, attentions, gradients, strict=True):
            acc.add(layer, a, g)
        return acc.done()


class _Products:
    """Accumulates GradientProducts one layer at a time (in any order) of the model layers
    ``layers`` (None: all ``depth``); other layers given to ``add`` are ignored."""

    def __init__(self, depth: int, layers: Sequence[int] | None = None) -> None:
        self.L = depth
        self.layers = tuple(range(depth)) if layers is None else tuple(layers)
        self.slot = {layer: i for i, layer in enumerate(self.layers)}
        self.seen: set[int] = set()
        self.weighted: Tensor | None = None
        self.positive: Tensor | None = None
        self.grad_sam: Tensor | None = None
        self.last: Tensor | None = None

    def add(self, layer: int, a: Tensor, g: Tensor) -> None:
        """A_l and G_l, (B, H, N, N) each (any float dtype; reduced in float32)."""
        if layer in self.seen or layer not in self.slot:
            return
        a, g = a.detach().float(), g.detach().float()
        B, H, N, _ = a.shape
        if self.weighted is None:
            K = len(self.layers)
            self.weighted = torch.empty((K, B, N, N), dtype=torch.float32, device=a.device)
            self.positive = torch.empty_like(self.weighted)
            self.grad_sam = torch.zeros((B, N, N), dtype=torch.float32, device=a.device)
        assert self.positive is not None and self.grad_sam is not None
        weighted = self.weighted[self.slot[layer]]  # (B, N, N), a head at a time
        positive = self.positive[self.slot[layer]]
        weighted.zero_()
        positive.zero_()
        for h in range(H):
            product = a[:, h] * g[:, h]  # (B, N, N)
            weighted += product
            positive += product.clamp_min_(0)
            self.grad_sam.addcmul_(g[:, h].clamp_min(0), a[:, h], value=1 / (self.L * H))
            del product
        weighted /= H
        positive /= H
        if layer == self.L - 1:
            self.last = g.clone()
        self.seen.add(layer)

    def done(self) -> GradientProducts:
        if len(self.seen) != len(self.layers):
            missing = sorted(set(self.layers) - self.seen)
            raise RuntimeError(f"no gradient reached the attention of layers {missing}")
        assert self.weighted is not None and self.positive is not None
        assert self.grad_sam is not None
        assert self.last is not None or self.L - 1 not in self.slot
        partial = None if len(self.layers) == self.L else self.layers
        return GradientProducts(self.weighted, self.positive, self.grad_sam, self.last, partial)


@dataclass
class ReducedGradients:
    """A forward pass with capture and its backward pass reduced to GradientProducts."""

    logits: Tensor  # (B, C), detached
    attentions: list[Tensor]  # L × (B, H, N, N), detached
    products: GradientProducts
    target: Tensor  # (B,) long
    hidden_states: list[Tensor] = field(default_factory=list)
    grid: tuple[int, int] = (0, 0)
    num_prefix_tokens: int = 0


def attention_gradient_products(
    model: VisionTransformer,
    x: Tensor,
    target: int | Tensor | None = None,
    hidden_states: bool = False,
    layers: Sequence[int] | None = None,
) -> ReducedGradients:
    """As ``attention_gradients``, but each G_l is reduced with A_l by a hook as soon as the
    backward pass has made it, and dropped: the peak holds the graph and one layer's gradient,
    not all L of them. ``layers``: reduce only these model layers' (None: every layer)."""
    if model.config.num_classes == 0:
        raise ValueError("this model has no classification head: gradient methods need one")
    with torch.enable_grad():
        x = x.detach().requires_grad_(True)
        out = model.forward_explained(x, capture_attention=True, hidden_states=hidden_states)
        logits = out.logits
        target_t = target_classes(logits, target)
        y = logits.gather(1, target_t[:, None]).sum()
        depth = len(out.attentions)
        kept = list(range(depth)) if layers is None else list(layers)
        if isinstance(model, VisionTransformer):
            products = _reduce_by_hooks(y, out.attentions, kept)
        else:  # model code: a captured attention can be a view beside the tensor the forward
            # pass computes with, where no hook would fire: ask for each G_l by name
            grads = torch.autograd.grad(y, [out.attentions[i] for i in kept])
            atts = [out.attentions[i].detach() for i in kept]
            products = GradientProducts.of(atts, grads, None if layers is None else kept, depth)
            del grads, atts
    return ReducedGradients(
        logits=logits.detach(),
        attentions=[a.detach() for a in out.attentions],
        products=products,
        target=target_t.detach(),
        hidden_states=[h.detach() for h in out.hidden_states],
        grid=out.grid,
        num_prefix_tokens=out.num_prefix_tokens,
    )


def _reduce_by_hooks(
    y: Tensor, attentions: Sequence[Tensor], layers: Sequence[int]
) -> GradientProducts:
    """Each G_l of the model layers ``layers`` (sorted) reduced with A_l by a hook as the
    backward pass from ``y`` makes it."""
    partial = None if len(layers) == len(attentions) else layers
    acc = _Products(len(attentions), partial)
    handles = []
    for layer in layers:
        a_kept = attentions[layer].detach()

        def hook(g: Tensor, layer: int = layer, a_kept: Tensor = a_kept) -> None:
            acc.add(layer, a_kept, g)

        handles.append(attentions[layer].register_hook(hook))
    first = attentions[layers[0]]
    try:
        (g0,) = torch.autograd.grad(y, first)
    finally:
        for h in handles:
            h.remove()
    acc.add(layers[0], first, g0)  # no-op when its hook ran
    return acc.done()
