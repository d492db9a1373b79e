"""Checks the zoo tests of timm's CLS-token kinds (CaiT, ConViT, XCiT) share: vitviz's logits
and attention against timm's, the native and folder round trips, timm's float64 attention and
its gradients for the method references. Each kind's test calls them with its own model, shapes
and blocks, so each still runs, and can fail, for each kind."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from timm.models import save_for_hf
from torch import Tensor, nn
from zoo_helpers import ATTN_ATOL, LOGIT_ATOL, assert_close

from vitviz.checkpoints import load_checkpoint
from vitviz.checkpoints.native import save_checkpoint
from vitviz.kindapi import kind_of


def assert_library_outputs(
    library_model: Any, model: nn.Module, loaded: Any, x: Tensor, shapes: Sequence[tuple]
) -> tuple[Tensor, float]:
    """timm's attention (read by the family's ``library_model``) has the matrices' ``shapes``
    (their last two sizes); vitviz's logits (relative to timm's largest) and every attention
    equal timm's. Returns vitviz's logits and that scale, for the fused path's check."""
    ref_logits, ref_attn = library_model.read(model, x)
    assert [tuple(a.shape[2:]) for a in ref_attn] == list(shapes)
    logits, attn = kind_of(loaded.model).library_outputs(loaded.model, x)
    scale = float(ref_logits.abs().max())
    assert_close("logits", ref_logits / scale, logits / scale, LOGIT_ATOL)
    for i, (a, b) in enumerate(zip(ref_attn, attn, strict=True)):
        assert_close(f"attention {i}", a, b, ATTN_ATOL)
    return logits, scale


def assert_native_and_folder(
    model: nn.Module,
    loaded: Any,
    tmp_path: Path,
    args: dict[str, Any],
    compare: Callable[[nn.Module, Any], None],
) -> None:
    """``loaded`` saved as vitviz's own checkpoint opens as the same kind and config, and
    timm's folder of ``model`` (built with ``args``, with class names) as the same family with
    its names, checked against timm; ``compare(model, loaded)`` holds for both."""
    kind = kind_of(loaded.model).name
    native = save_checkpoint(loaded.model, tmp_path / f"{kind}.safetensors", loaded.class_names)
    again = load_checkpoint(native)
    assert kind_of(again.model).name == kind and again.config == loaded.config
    compare(model, again)
    names = ["a", "b", "c", "d", "e"]
    folder = tmp_path / kind
    save_for_hf(
        model, folder, model_config={"label_names": names}, model_args=args,
        safe_serialization=True,
    )  # fmt: skip
    opened = load_checkpoint(folder)
    assert opened.family == loaded.family and opened.class_names == names
    assert any(n.startswith("checked against timm") for n in opened.notes), opened.notes
    compare(model, opened)


def timm_attention_pass(
    blocks: Iterable[nn.Module],
    model: nn.Module,
    x: Tensor,
    target: int,
    pick: Callable[[Tensor], Tensor] = lambda t: t[0],
) -> tuple[list[Tensor], list[Tensor]]:
    """timm's attention matrices of ``blocks`` (of ``model``, already in float64; their
    explicit path, kept at attn_drop) on ``x`` in float64 and their gradients of logit
    ``target``, each through ``pick`` (default: the first image's, (H, N_q, N_k))."""
    kept: list[Tensor] = []
    for block in blocks:
        block.attn.fused_attn = False
        block.attn.attn_drop.register_forward_hook(lambda _m, _i, o: kept.append(o) or o)
    logits = model(x.double())
    for t in kept:
        t.retain_grad()
    logits[0, target].backward()
    return [pick(t).detach() for t in kept], [pick(t.grad) for t in kept]


def min_max(m: Tensor, grid: tuple[int, int]) -> Tensor:
    """``m`` scaled to [0, 1] on ``grid``."""
    return ((m - m.min()) / (m.max() - m.min())).reshape(grid)
