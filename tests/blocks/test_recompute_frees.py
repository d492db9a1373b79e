"""A recomputed block frees what its recomputation made once the backward pass is done: the
saved tensors of the second run are not held by their own graph (a cycle through autograd's C++
nodes that Python's collector can't free, which lost one block's activations per gradient
pass: on a GPU, 136 GiB after a dozen ViT-L/14 relevance maps)."""

from __future__ import annotations

import gc
import weakref

import torch
import torch.nn.functional as F

from vitviz.blocks.recompute import recomputed


def test_what_the_recomputation_made_is_freed_after_the_backward_pass() -> None:
    torch.manual_seed(0)
    linear = torch.nn.Linear(8, 8)
    outputs: list[weakref.ref] = []

    def block(t: torch.Tensor) -> torch.Tensor:
        out = F.gelu(linear(t)).softmax(-1)  # softmax saves its own output
        outputs.append(weakref.ref(out))
        return out

    x = torch.randn(4, 8, requires_grad=True)
    y = recomputed(block, x)
    (grad,) = torch.autograd.grad(y.sum() + (y**2).sum(), x)
    want = torch.autograd.grad((lambda o: o.sum() + (o**2).sum())(block(x)), x)[0]
    torch.testing.assert_close(grad, want)  # the recomputation gives the same gradient
    del y
    gc.collect()
    assert len(outputs) == 3  # the forward pass, its recomputation, the plain run
    assert [r() is None for r in outputs] == [True, True, True]
