"""One image's autograd graph from each layer's attention to the final tokens, kept after the
capture forward pass, so a later target's attention gradients are one backward pass.

A model whose classes change without the image changing (a CLIP's typed prompts) asks its
analysis to keep the graph its capture forward pass made (``capture_batch(keep_graph=True)``):
the explicit attention path's A_l (1, H, N, N) of every layer, and the final tokens (1, N, D)
they lead to, with the graph between them. A new target y (the head run again on the kept
tokens: a few small matmuls) then needs only

    G_l = ∂y/∂A_l = torch.autograd.grad(y, [A_1 .. A_L], retain_graph=True)

which walks the blocks backwards once. The parameters take no part (``frozen_parameters``:
no weight gradient is asked for or made, and the graph saves no activation for one), so the
backward pass costs about one forward pass of matmuls and the graph holds the activations the
input gradients need: for ViT-B/32 at 224 about 27 MiB (``benchmarks/clip.py`` prints it).
The graph is one image's: it lives in that image's analysis and goes with it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor, nn


@contextmanager
def frozen_parameters(model: nn.Module) -> Iterator[None]:
    """``model``'s parameters without ``requires_grad`` inside the block (restored after): a
    graph made there records the activations' path alone."""
    thawed = [p for p in model.parameters() if p.requires_grad]
    for p in thawed:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in thawed:
            p.requires_grad_(True)


@dataclass
class KeptGraph:
    """The capture forward pass's graph for one image: ``attentions`` L × (1, H, N, N), every
    layer's post-softmax attention in the graph, and ``tokens`` (1, N, D), the final tokens
    (after the final norm) the head reads, in the same graph."""

    attentions: list[Tensor]
    tokens: Tensor

    def gradients(self, y: Tensor, layers: Sequence[int], extra: Sequence[Tensor] = ()) -> list:
        """∂y/∂A_l for the model layers ``layers`` (each (1, H, N, N)), then ∂y/∂t for each
        tensor t of ``extra`` (made from ``tokens`` after the forward pass, e.g. a pooling
        head's attention); the graph is kept for the next target."""
        wanted = [self.attentions[layer] for layer in layers] + list(extra)
        return list(torch.autograd.grad(y, wanted, retain_graph=True))

    def saved_bytes(self, model: nn.Module) -> int:
        """What the kept graph holds beyond ``model``'s weights, in bytes: the distinct storages
        of the tensors its backward pass would read (attentions, activations)."""
        weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
        seen: dict[int, int] = {}
        stack = [self.tokens.grad_fn]
        visited: dict[int, object] = {}  # id -> node (held, so an id is never reused)
        while stack:
            node = stack.pop()
            if node is None or id(node) in visited:
                continue
            visited[id(node)] = node
            for name in dir(node):
                if name.startswith("_saved_"):
                    try:
                        value = getattr(node, name, None)
                    except RuntimeError:  # a buffer already freed: it holds nothing
                        continue
                    if isinstance(value, Tensor):
                        storage = value.untyped_storage()
                        if storage.data_ptr() not in weights:
                            seen[storage.data_ptr()] = storage.nbytes()
            stack.extend(next_node for next_node, _ in node.next_functions)
        return sum(seen.values())
