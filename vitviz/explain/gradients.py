"""G_l = ∂y_c/∂A_l: the gradient of a class logit with respect to each layer's attention."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

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
