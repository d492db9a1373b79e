"""Checks the staged kinds' intermediates tests share (MViTv2, PiT, TNT, LeViT): each kind's test
opens its own tiny perturbed timm model and calls these with its own layers, heads and grids,
so every check still runs, and can fail, for each kind."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from torch import Tensor, nn
from zoo_helpers import images


def opened_case(ref: nn.Module, loaded: Any, size: int) -> tuple[nn.Module, Any, Tensor, Any]:
    """(timm's ``ref``, vitviz's ``loaded``, two fixed images x (2, 3, size, size), the
    intermediates of x), as the kinds' ``opened`` fixtures return them."""
    x = images(2, size, size, seed=3)
    with torch.no_grad():
        inter = loaded.kind.intermediates(loaded.model, x)
    return ref, loaded, x, inter


@contextmanager
def recording(
    taps: Mapping[str, Iterable[tuple[nn.Module, Callable[[Any], Any]]]],
) -> Iterator[dict[str, list]]:
    """While open, each tapped module's output, through its pick, is appended under its name
    (in call order); the hooks are removed on leaving, however it is left."""
    got: dict[str, list] = {name: [] for name in taps}
    handles = []
    try:
        for name, pairs in taps.items():
            for module, pick in pairs:
                hook = lambda _m, _i, o, name=name, pick=pick: got[name].append(pick(o))  # noqa: E731
                handles.append(module.register_forward_hook(hook))
        yield got
    finally:
        for h in handles:
            h.remove()


def rel_err(got: Tensor, want: Tensor, scale: Tensor | None = None) -> float:
    """The largest difference relative to ``scale``'s (default ``want``'s) largest magnitude."""
    ref = want if scale is None else scale
    return float((got - want).abs().max()) / float(ref.abs().max())


def check_blocks_and_prefix(
    inter: Any, want: Sequence[Tensor], grids: Sequence[tuple[int, int]], prefix: int
) -> None:
    """Each block's patches on its grid and its ``prefix`` tokens equal timm's block outputs
    ``want`` (B, prefix + h·w, C), and its grid says so."""
    assert len(inter.blocks) == len(want) == len(grids)
    for b, (grid_out, pre, w) in enumerate(
        zip(inter.blocks, inter.block_prefix, want, strict=True)
    ):
        h, wd = grids[b]
        assert tuple(grid_out.shape[-2:]) == (h, wd) and pre.shape[1] == prefix
        patches = w[:, prefix:].transpose(1, 2).reshape(w.shape[0], -1, h, wd)
        assert rel_err(grid_out, patches, w) < 1e-5, b
        assert rel_err(pre, w[:, :prefix], w) < 1e-5, b
        grid = inter.block_grids[b]
        assert grid.grid == (h, wd) and grid.num_prefix_tokens == prefix


def check_heads_through_projection(inter: Any, want: Sequence[Tensor]) -> None:
    """Each layer's heads (B, H, N, d), merged and through its projection, are timm's attention
    branch ``want`` (B, N, C)."""
    for b, (heads, proj, w) in enumerate(zip(inter.heads, inter.projections, want, strict=True)):
        B, H, N, d = heads.shape
        with torch.no_grad():
            got = proj(heads.transpose(1, 2).reshape(B, N, H * d))
        assert rel_err(got, w) < 1e-5, b


def zero_columns(weight: Tensor, head: int, width: int) -> None:
    """Zero head ``head``'s ``width`` input columns of a projection's ``weight``."""
    weight[:, head * width : (head + 1) * width] = 0


def zero_attn_head(layer: int, head: int) -> Callable[[nn.Module], None]:
    """``zero`` for ``check_zeroed_head`` where ``model.blocks[layer].attn`` has ``heads`` and a
    ``proj`` Linear taking the heads side by side."""

    def zero(model: nn.Module) -> None:
        attn = model.blocks[layer].attn
        zero_columns(attn.proj.weight, head, attn.proj.in_features // attn.heads)

    return zero


def check_zeroed_head(
    loaded: Any, x: Tensor, inter: Any, layer: int, head: int, zero: Callable[[nn.Module], None]
) -> None:
    """Head (``layer``, ``head``) replaced by None gives the logits of a copy of the model
    that ``zero`` changed (its projection's columns zeroed), and not the plain logits."""
    with torch.no_grad():
        got = loaded.kind.intermediates(loaded.model, x, replace={(layer, head): None}).logits
        model = copy.deepcopy(loaded.model)
        zero(model)
        want = model(x)
    assert not torch.allclose(got, inter.logits)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def check_replaced_by_itself(loaded: Any, x: Tensor, inter: Any, layer: int, head: int) -> None:
    """A head replaced by its own output changes no logit."""
    itself = {(layer, head): inter.heads[layer][:, head]}
    with torch.no_grad():
        same = loaded.kind.intermediates(loaded.model, x, replace=itself).logits
    assert torch.equal(same, inter.logits)


def check_bad_replacements(loaded: Any, x: Tensor, layers: int, layer: int, heads: int) -> None:
    """A layer past the ``layers``, a head past ``layer``'s ``heads``, a wrong-shaped tensor and
    a number are refused by name, and no hook is left on the model."""
    for bad, words in (
        ({(layers, 0): None}, f"layer {layers}"),
        ({(layer, heads): None}, f"head {heads}"),
        ({(0, 0): torch.zeros(2, 5, 8)}, "replacement"),
        ({(0, 0): 1.0}, "tensor"),
    ):
        with pytest.raises(ValueError, match=words):
            loaded.kind.intermediates(loaded.model, x, replace=bad)
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in loaded.model.modules())


def check_readout_and_gradients(
    loaded: Any, x: Tensor, reached: Callable[[Any], list[Tensor]]
) -> None:
    """The readout of the last block's prefix and patches is the logits, and a class's logit
    has a gradient on each of the ``reached(intermediates)`` tensors."""
    inter = loaded.kind.intermediates(loaded.model, x)
    readout = loaded.kind.readout(loaded.model)
    patches = inter.blocks[-1].flatten(2).transpose(1, 2)
    torch.testing.assert_close(readout.logits(inter.block_prefix[-1], patches), inter.logits)
    y = inter.logits[:, 0].sum()
    grads = torch.autograd.grad(y, reached(inter))
    assert all(float(g.abs().sum()) > 0 for g in grads)
