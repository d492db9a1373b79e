"""G_l = ∂y_c/∂A_l: the gradient of a class logit with respect to each layer's attention."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from vitviz.explain.targets import target_classes
from vitviz.model.vit import VisionTransformer


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
    (2/H + 1/L + 1/(L·H)) of the attention's memory instead of all of it)."""

    weighted: Tensor  # (L, B, N, N) mean_h(A_l ⊙ G_l): gradient rollout takes its positive part
    positive: Tensor  # (L, B, N, N) mean_h((G_l ⊙ A_l)⁺): relevance's Ā_l
    grad_sam: Tensor  # (B, N, N) mean_{l,h}(G_l⁺ ⊙ A_l): Grad-SAM before the query's row
    last: Tensor  # (B, H, N, N) G_L of the last layer: Grad-CAM on attention

    def image(self, i: int) -> GradientProducts:
        """Image ``i``'s products (batch axis of 1), copied so the batch's can be freed."""
        return GradientProducts(
            self.weighted[:, i : i + 1].clone(),
            self.positive[:, i : i + 1].clone(),
            self.grad_sam[i : i + 1].clone(),
            self.last[i : i + 1].clone(),
        )

    @classmethod
    def of(cls, attentions: Sequence[Tensor], gradients: Sequence[Tensor]) -> GradientProducts:
        """From full L × (B, H, N, N) attention and gradients (a layer at a time)."""
        acc = _Products(len(attentions))
        for layer, (a, g) in enumerate(zip(attentions, gradients, strict=True)):
            acc.add(layer, a, g)
        return acc.done()


class _Products:
    """Accumulates GradientProducts one layer at a time (in any order)."""

    def __init__(self, layers: int) -> None:
        self.L = layers
        self.seen: set[int] = set()
        self.weighted: Tensor | None = None
        self.positive: Tensor | None = None
        self.grad_sam: Tensor | None = None
        self.last: Tensor | None = None

    def add(self, layer: int, a: Tensor, g: Tensor) -> None:
        """A_l and G_l, (B, H, N, N) each (any float dtype; reduced in float32)."""
        if layer in self.seen:
            return
        a, g = a.detach().float(), g.detach().float()
        B, H, N, _ = a.shape
        if self.weighted is None:
            self.weighted = torch.empty((self.L, B, N, N), dtype=torch.float32, device=a.device)
            self.positive = torch.empty_like(self.weighted)
            self.grad_sam = torch.zeros((B, N, N), dtype=torch.float32, device=a.device)
        assert self.positive is not None and self.grad_sam is not None
        weighted = self.weighted[layer]  # (B, N, N), summed a head at a time: small temporaries
        positive = self.positive[layer]
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
        if len(self.seen) != self.L:
            missing = sorted(set(range(self.L)) - self.seen)
            raise RuntimeError(f"no gradient reached the attention of layers {missing}")
        assert self.weighted is not None and self.positive is not None
        assert self.grad_sam is not None and self.last is not None
        return GradientProducts(self.weighted, self.positive, self.grad_sam, self.last)


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
) -> ReducedGradients:
    """As ``attention_gradients``, but each G_l is reduced with A_l by a hook as soon as the
    backward pass has made it, and dropped: the peak holds the graph and one layer's gradient,
    not all L of them."""
    if model.config.num_classes == 0:
        raise ValueError("this model has no classification head: gradient methods need one")
    with torch.enable_grad():
        x = x.detach().requires_grad_(True)
        out = model.forward_explained(x, capture_attention=True, hidden_states=hidden_states)
        logits = out.logits
        target_t = target_classes(logits, target)
        y = logits.gather(1, target_t[:, None]).sum()
        if isinstance(model, VisionTransformer):
            products = _reduce_by_hooks(y, out.attentions)
        else:  # model code: a captured attention can be a view beside the tensor the forward
            # pass computes with, where no hook would fire: ask for each G_l by name
            grads = torch.autograd.grad(y, out.attentions)
            products = GradientProducts.of([a.detach() for a in out.attentions], grads)
            del grads
    return ReducedGradients(
        logits=logits.detach(),
        attentions=[a.detach() for a in out.attentions],
        products=products,
        target=target_t.detach(),
        hidden_states=[h.detach() for h in out.hidden_states],
        grid=out.grid,
        num_prefix_tokens=out.num_prefix_tokens,
    )


def _reduce_by_hooks(y: Tensor, attentions: Sequence[Tensor]) -> GradientProducts:
    """Each G_l reduced with A_l by a hook as the backward pass from ``y`` makes it."""
    acc = _Products(len(attentions))
    handles = []
    for layer, a in enumerate(attentions):
        a_kept = a.detach()

        def hook(g: Tensor, layer: int = layer, a_kept: Tensor = a_kept) -> None:
            acc.add(layer, a_kept, g)

        handles.append(a.register_hook(hook))
    try:
        (g0,) = torch.autograd.grad(y, attentions[0])
    finally:
        for h in handles:
            h.remove()
    acc.add(0, attentions[0], g0)  # no-op when its hook ran
    return acc.done()
