"""Knocking heads out of a model of any kind (DESIGN §5, "Interventions"), written once on the
kinds' intermediates accessor (DESIGN §3).

- Zero ablation of head (l, h): its slice of the attention output before the output projection
  is 0 for every token.
- Mean ablation: that slice is its mean over the image's tokens, taken in the pass itself (the
  heads of earlier layers already knocked out).
- Dataset-mean ablation (``DatasetMean``): its mean over a folder's images and their tokens.
- A tensor (head_dim,): every token of the head becomes it.
- The attention branch of block b (``branches``, blocks counted as ``mlps`` counts them, 0-based
  over the model's blocks): the branch's output is 0 (the output of the
  modules the accessor names as the branch, ``Intermediates.attention_branches``: the
  projection, bias included, or the norm after it in a residual post-norm block), so the block
  adds its MLP alone.
- The MLP branch of block l (``mlps``): the output of the module the block's residual adds as
  its MLP branch (``Intermediates.mlps``) is 0, so the block adds its attention alone.

Every replacement is the same for every token, so it is written where the accessor reads the
heads (the input of each attention layer's output projection, ``Intermediates.projections``)
whatever the module's token order is: ``holding`` hooks it there for any pass, an analysis's
included, and ``analyze_ablated`` runs a kind's own analysis inside it.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from vitviz.core.errors import VitvizError
from vitviz.kindapi import Intermediates, KindAnalysis, ModelKind
from vitviz.pipeline.intervention_record import InterventionRecord, mark

MODES = ("zero", "mean")


class InterventionError(VitvizError):
    """A head or block the model lacks, an ablation that is not one, images that can't be
    patched into each other: one line."""


@dataclass(frozen=True)
class DatasetMean:
    """Each head's mean output before the output projection over ``images`` images and their
    tokens: per attention layer (heads, head_dim) (``dataset_mean``)."""

    means: tuple[Tensor, ...]
    images: int


Ablation = str | Tensor | DatasetMean  # "zero" | "mean" | (head_dim,) | DatasetMean


@dataclass(frozen=True)
class HeadLayout:
    """What a model's attention layers are as the accessor reads them: each layer's output
    projection, its head count and head width; the blocks in order and each one's MLP branch
    (None: it has none); each attention layer's attention-branch modules."""

    projections: tuple[nn.Module, ...]
    heads: tuple[int, ...]
    head_dims: tuple[int, ...]
    blocks: tuple[nn.Module, ...] = ()
    mlps: tuple[nn.Module | None, ...] = ()
    attention_branches: tuple[tuple[nn.Module, ...], ...] = ()
    head_projections: tuple[tuple[nn.Module, ...], ...] = ()  # a layer's heads, branch by branch
    block_layers: tuple[int | None, ...] = ()  # each block's attention layer (None: none read)

    @classmethod
    def of(cls, out: Intermediates) -> HeadLayout:
        return cls(
            projections=tuple(out.projections),
            heads=tuple(int(h.shape[1]) for h in out.heads),
            head_dims=tuple(int(h.shape[-1]) for h in out.heads),
            blocks=tuple(out.block_modules),
            mlps=tuple(out.mlps),
            attention_branches=tuple(out.attention_branches)
            or tuple((p,) for p in out.projections),
            head_projections=tuple(out.head_projections) or tuple((p,) for p in out.projections),
            block_layers=_block_layers(out.block_modules, out.projections),
        )

    @property
    def layers(self) -> int:
        return len(self.heads)

    def check_heads(self, heads: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
        """``heads`` as sorted unique (layer, head) pairs; InterventionError (one line) for a
        layer or head the model lacks."""
        for key in heads:
            if not (isinstance(key, tuple) and len(key) == 2 and all(_is_int(k) for k in key)):
                raise InterventionError(f"a head is (layer, head), two ints from 0: {key!r}")
            layer, head = key
            self.check_layer(layer, f"head {layer}.{head}")
            if not 0 <= head < self.heads[layer]:
                raise InterventionError(
                    f"head {layer}.{head}: layer {layer} has heads 0–{self.heads[layer] - 1}"
                )
        return sorted(set(heads))

    def attention_layer(self, block: int, what: str) -> int:
        """The attention layer (the head grid's row) of block ``block``, blocks counted 0-based
        over the model's blocks as ``check_mlp`` counts them; InterventionError (one line) for a
        block the model lacks or one whose heads are no row of the head grid (an XCiT's XCA
        blocks)."""
        owners = self.block_layers or tuple(range(self.layers))
        if not _is_int(block) or not 0 <= block < len(owners):
            raise InterventionError(
                f"{what}: the model has blocks 0–{len(owners) - 1}, no block {block}"
            )
        layer = owners[block]
        if layer is None:
            rows = [b for b, owned in enumerate(owners) if owned is not None]
            raise InterventionError(
                f"{what}: block {block}'s heads are no row of the head grid, so its attention "
                f"can't be knocked out (the grid's rows are blocks {rows[0]}–{rows[-1]})"
            )
        return layer

    def check_mlp(self, block: int) -> None:
        """InterventionError (one line) for a block the model lacks or one without an MLP."""
        what = f"the MLP branch of block {block}"
        if not _is_int(block) or not 0 <= block < len(self.mlps):
            raise InterventionError(
                f"{what}: the model has blocks 0–{len(self.mlps) - 1}, no block {block}"
            )
        if self.mlps[block] is None:
            raise InterventionError(f"{what}: block {block} has no MLP")

    def check_layer(self, layer: int, what: str) -> None:
        if not _is_int(layer) or not 0 <= layer < self.layers:
            unread = len(self.blocks) - self.layers  # blocks whose heads the accessor can't read
            why = (
                f" (layers count the head grid's rows; the heads of its {unread} other blocks "
                "can't be knocked out)"
                if unread > 0
                else ""
            )
            raise InterventionError(
                f"{what}: the model has attention layers 0–{self.layers - 1}, no layer {layer}"
                + why
            )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _block_layers(
    blocks: Sequence[nn.Module], projections: Sequence[nn.Module]
) -> tuple[int | None, ...]:
    """Each of ``blocks``' attention layer: the one whose projection it holds (None: none)."""
    layer_of = {id(p): layer for layer, p in enumerate(projections)}
    return tuple(
        next((layer_of[id(m)] for m in block.modules() if id(m) in layer_of), None)
        for block in blocks
    )


_LAYOUTS: weakref.WeakKeyDictionary[nn.Module, HeadLayout] = weakref.WeakKeyDictionary()


def model_input(loaded: Any, image: Any) -> Tensor:
    """(1, C, H, W) on the model's device: a normalised tensor (C, H, W) or (1, C, H, W) as it
    is, anything else prepared as the kind's analysis prepares it."""
    if isinstance(image, Tensor):
        x = image[None] if image.ndim == 3 else image
        if x.ndim != 4 or x.shape[0] != 1:
            raise InterventionError(f"one image (C, H, W) is needed, got {tuple(image.shape)}")
    else:
        with torch.no_grad():
            x = loaded.kind.analyze(loaded, image).input[None]
    param = next(loaded.model.parameters())
    return x.to(device=param.device, dtype=param.dtype)


def head_layout(kind: ModelKind, model: nn.Module, x: Tensor) -> HeadLayout:
    """The model's ``HeadLayout``, read by one accessor pass of ``x`` (1, C, H, W) the first
    time a model is asked (kept while the model lives)."""
    layout = _LAYOUTS.get(model)
    if layout is None:
        with torch.no_grad():
            layout = _LAYOUTS[model] = HeadLayout.of(kind.intermediates(model, x))
    return layout


def check_ablation(ablation: Ablation) -> None:
    """InterventionError for an ablation that is none of "zero", "mean", a (head_dim,) tensor or
    a ``DatasetMean``."""
    if isinstance(ablation, str):
        if ablation not in MODES:
            raise InterventionError(
                f"ablation {ablation!r}: use one of {', '.join(MODES)}, a tensor (head_dim,) or "
                "a dataset mean"
            )
    elif isinstance(ablation, Tensor):
        if ablation.ndim != 1:
            raise InterventionError(
                f"an ablation tensor is one vector (head_dim,), got {tuple(ablation.shape)}"
            )
    elif not isinstance(ablation, DatasetMean):
        raise InterventionError(f"an ablation is 'zero', 'mean' or a tensor, got {ablation!r}")


def fixed_value(ablation: Ablation, layout: HeadLayout, layer: int, head: int) -> Tensor | None:
    """The (head_dim,) vector head (layer, head) becomes under an image-independent
    ``ablation`` (None: zero); "mean" is the image's and is asked of ``mean_values``."""
    hd = layout.head_dims[layer]
    if isinstance(ablation, DatasetMean):
        return ablation.means[layer][head]
    if isinstance(ablation, Tensor):
        if ablation.shape[0] != hd:
            raise InterventionError(
                f"head {layer}.{head} is {hd} wide; the ablation tensor has {ablation.shape[0]}"
            )
        return ablation
    return None


def mean_values(
    kind: ModelKind, model: nn.Module, x: Tensor, heads: Sequence[tuple[int, int]]
) -> dict[tuple[int, int], Tensor]:
    """{(layer, head): (B, head_dim)} the heads' means over each image's tokens of ``x``
    (B, C, H, W), each layer's taken in a pass with the earlier layers' heads already replaced by
    theirs (one accessor pass per layer knocked out)."""
    values: dict[tuple[int, int], Tensor] = {}
    tokens: list[int] = []  # each layer's token count, from the first (clean) pass
    with torch.no_grad():
        for layer in sorted({layer for layer, _ in heads}):
            replace = {key: v[:, None].expand(-1, tokens[key[0]], -1) for key, v in values.items()}
            out = kind.intermediates(model, x, replace=replace or None)
            tokens = tokens or [int(h.shape[2]) for h in out.heads]
            for lay, h in heads:
                if lay == layer:
                    values[(lay, h)] = out.heads[lay][:, h].mean(dim=1)
    return values


@contextmanager
def holding(
    layout: HeadLayout,
    values: Mapping[tuple[int, int], Tensor | None],
    branches: Sequence[int] = (),
    mlps: Sequence[int] = (),
) -> Iterator[None]:
    """While open, every pass of the model has ``values``' heads replaced ({(layer, head):
    None (zero) or a vector (head_dim,) or (B, head_dim) for every token}), the attention
    branch of each block of ``branches`` and the MLP branch of each block of ``mlps`` zeroed;
    the hooks go when it closes, whatever happens."""
    by_layer: dict[int, dict[int, Tensor | None]] = {}
    for (layer, head), value in values.items():
        by_layer.setdefault(layer, {})[head] = value
    handles = []
    try:
        for layer, heads in by_layer.items():
            projections = layout.head_projections[layer]
            each = layout.heads[layer] // len(projections)  # a branch's heads
            for b, projection in enumerate(projections):
                mine = {h - b * each: v for h, v in heads.items() if b * each <= h < (b + 1) * each}
                if mine:
                    hook = _head_hook(each, layout.head_dims[layer], mine)
                    handles.append(projection.register_forward_pre_hook(hook))
        layers = {layout.attention_layer(block, "an attention branch") for block in branches}
        for layer in sorted(layers):
            for module in layout.attention_branches[layer]:
                handles.append(module.register_forward_hook(_zero_output))
        for block in sorted(set(mlps)):
            module = layout.mlps[block]
            assert module is not None  # check_mlp refused a block without one
            handles.append(module.register_forward_hook(_zero_output))
        yield
    finally:
        for handle in handles:
            handle.remove()


def _zero_output(_module: nn.Module, _args: tuple[Any, ...], output: Tensor) -> Tensor:
    return output * 0  # 0, still joined to the graph: the layer's gradients are 0, not missing


def _head_hook(heads: int, head_dim: int, wanted: Mapping[int, Tensor | None]):
    """A pre-hook on a projection whose input (B, *, heads · head_dim) gets ``wanted``'s heads
    replaced on every token."""

    def hook(_module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
        inp = args[0]
        C = heads * head_dim
        if inp.shape[-1] != C:
            raise InterventionError(f"a projection read {inp.shape[-1]} channels, not {C}")
        B = inp.shape[0]
        mask = torch.zeros(C, dtype=torch.bool, device=inp.device)
        fill = inp.new_zeros(B, C)
        for head, value in wanted.items():
            cols = slice(head * head_dim, (head + 1) * head_dim)
            mask[cols] = True
            if value is not None:
                fill[:, cols] = value.to(device=inp.device, dtype=inp.dtype)
        fill = fill.view(B, *([1] * (inp.ndim - 2)), C)
        return (torch.where(mask, fill, inp), *args[1:])

    return hook


def ablation_values(
    kind: ModelKind,
    model: nn.Module,
    x: Tensor,
    layout: HeadLayout,
    heads: Sequence[tuple[int, int]],
    ablation: Ablation,
) -> dict[tuple[int, int], Tensor | None]:
    """{(layer, head): None or (B, head_dim)} what ``heads`` become under ``ablation`` for the
    images ``x`` (B, C, H, W)."""
    check_ablation(ablation)
    if isinstance(ablation, str) and ablation == "mean":
        return dict(mean_values(kind, model, x, heads))
    return {key: fixed_value(ablation, layout, *key) for key in heads}


@contextmanager
def knocked_out(
    loaded: Any,
    image: Any,
    ablate: Sequence[tuple[int, int]] = (),
    ablation: Ablation = "zero",
    branches: Sequence[int] = (),
    mlps: Sequence[int] = (),
    **options: Any,
) -> Iterator[None]:
    """While open, ``loaded``'s model has ``ablate``'s heads knocked out as ``ablation`` says
    for ``image``, ``branches``' attention branches and ``mlps``' MLP branches zeroed, in every
    pass (an analysis's,
    and the passes its gradient maps run later). A clean analysis (``options`` as given, no
    gradients) gives the model input when the ablation is the image's mean or the model's
    heads were not read yet."""
    kind, model = loaded.kind, loaded.model
    check_ablation(ablation)
    layout = _LAYOUTS.get(model)
    x = None
    if layout is None or (isinstance(ablation, str) and ablation == "mean"):
        plain = {k: v for k, v in options.items() if k != "gradients"}
        x = model_input(loaded, kind.analyze(loaded, image, **plain).input)
        layout = head_layout(kind, model, x)
    heads = layout.check_heads(list(ablate))
    for block in branches:
        layout.attention_layer(block, f"the attention branch of block {block}")
    for block in mlps:
        layout.check_mlp(block)
    if x is not None:
        values = ablation_values(kind, model, x, layout, heads, ablation)
    else:
        values = {key: fixed_value(ablation, layout, *key) for key in heads}
    with holding(layout, values, branches, mlps):
        yield


def analyze_ablated(
    loaded: Any,
    image: Any,
    ablate: Sequence[tuple[int, int]] = (),
    ablation: Ablation = "zero",
    branches: Sequence[int] = (),
    mlps: Sequence[int] = (),
    **options: Any,
) -> KindAnalysis:
    """The kind's own analysis of ``image`` inside ``knocked_out``: its logits, attention and
    the gradients it takes in its pass (``gradients=True``) are the intervened model's. A map
    that runs the model again later (another class's gradients) is the intervened model's only
    when made inside ``knocked_out`` too. The analysis carries what was done as
    ``intervention`` (an ``InterventionRecord``, written into its npz)."""
    with knocked_out(loaded, image, ablate, ablation, branches, mlps, **options):
        analysis = loaded.kind.analyze(loaded, image, **options)
    return mark(analysis, InterventionRecord.of(ablate, ablation, branches, mlps))


def dataset_mean(kind: ModelKind, model: nn.Module, inputs: Sequence[Tensor]) -> DatasetMean:
    """Each head's mean output over ``inputs`` (each (C, H, W), a normalised model input) and
    their tokens, every image weighing the same."""
    if not inputs:
        raise InterventionError("a dataset mean needs at least one image")
    sums: list[Tensor] | None = None
    param = next(model.parameters())
    with torch.no_grad():
        for x in inputs:
            out = kind.intermediates(model, x[None].to(device=param.device, dtype=param.dtype))
            means = [h[0].mean(dim=1).double() for h in out.heads]  # (heads, head_dim)
            sums = means if sums is None else [s + m for s, m in zip(sums, means, strict=True)]
    assert sums is not None
    return DatasetMean(means=tuple((s / len(inputs)).float() for s in sums), images=len(inputs))
