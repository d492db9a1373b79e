"""load_model_code(spec) -> LoadedModel: the user's file, imported, built, weighted, probed."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vitviz.checkpoints.loaded import LoadedModel, default_class_names
from vitviz.imaging import Preprocessing
from vitviz.kindapi import all_kinds, kind_of
from vitviz.kindapi.sides import CodeModelRequest, ModelCodeSide
from vitviz.modelcode.adapter import CapturedModel, ModelCodeConfig, RawRun, run_captured
from vitviz.modelcode.assembly import ONE_MATRIX, HeadPlan, MatrixPlan
from vitviz.modelcode.batching import FixedBatch
from vitviz.modelcode.blocks import block_containers, block_counts
from vitviz.modelcode.concat_order import watch_concat
from vitviz.modelcode.errors import (
    FixedBatchError,
    ModelCodeError,
    probe_run_error,
    setting_hint,
)
from vitviz.modelcode.heads import check_side_by_side, one_per_layer, plan_heads
from vitviz.modelcode.importing import (
    build_module,
    effective_args,
    find_factory,
    import_model_file,
    parameter_names,
)
from vitviz.modelcode.layout import PatchLayout, find_layout, patch_conv
from vitviz.modelcode.matrices import matrix_plan
from vitviz.modelcode.spec import ModelCodeSpec, read_class_names
from vitviz.modelcode.training_info import constructor_args, needs_more, read_training_info
from vitviz.modelcode.weights import FoundWeights, find_weights, read_weights_file

FAMILY = "model-code"
DEFAULT_MEAN_STD = (0.5,)  # one number: every channel
_LOOKED_AT = (
    ("Linear", nn.Linear),
    ("Conv2d", nn.Conv2d),
    ("LayerNorm", nn.LayerNorm),
    ("MultiheadAttention", nn.MultiheadAttention),
    ("Softmax", nn.Softmax),
)


def looked_at(model: nn.Module) -> str:
    """'12 Linear, 0 Conv2d, 4 LayerNorm, 0 MultiheadAttention, 0 Softmax' for messages."""
    counts = Counter(
        label for m in model.modules() for label, kind in _LOOKED_AT if isinstance(m, kind)
    )
    return ", ".join(f"{counts[label]} {label}" for label, _ in _LOOKED_AT)


def _probe(
    inner: nn.Module,
    layout: PatchLayout,
    name: str,
    file: Path,
    heads: HeadPlan | None = None,
    matrices: MatrixPlan | None = None,
    gradients: bool = False,
) -> RawRun:
    """One captured pass on a seeded random image, with block outputs and (without a plan)
    the module calls active at each attention noted; ``gradients``: with the autograd graph
    from the image on (its records can be differentiated)."""
    h, w = layout.image_size
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, layout.in_channels, h, w, generator=g)
    try:
        device = next(inner.parameters()).device
    except StopIteration:
        device = torch.device("cpu")
    try:
        with torch.set_grad_enabled(gradients):
            return run_captured(
                inner,
                x.to(device).requires_grad_(gradients),
                hidden_states=True,
                heads=heads,
                calls=heads is None and matrices is None,
                matrices=matrices,
            )
    except ModelCodeError:
        raise
    except Exception as exc:
        raise probe_run_error(exc, file, name, layout.in_channels, (h, w)) from exc


def _attention_layers(
    run: RawRun, inner: nn.Module, layout: PatchLayout, spec: ModelCodeSpec, notes: list[str]
) -> tuple[list[torch.Tensor], int]:
    """The recorded attention over the model's tokens, and that token count N."""
    gh, gw = layout.image_size[0] // layout.patch_size, layout.image_size[1] // layout.patch_size
    seen = run.log.attentions
    if not seen:
        raise ModelCodeError(
            f"no attention was seen in the forward pass of {spec.name}: looked at "
            f"{looked_at(inner)}; no softmax over a square (B, H, N, N) score tensor and no "
            f"scaled_dot_product_attention call was seen ({run.log.summary()})"
            + _per_matrix_hint(run.log.other_shapes)
        )
    sizes = sorted({a.shape[-1] for a in seen})
    if spec.num_prefix_tokens is not None:
        tokens = spec.num_prefix_tokens + gh * gw
    else:  # the most common size that holds every patch: N = prefix + gh·gw
        counts = Counter(a.shape[-1] for a in seen if a.shape[-1] >= gh * gw)
        if not counts:
            raise ModelCodeError(
                f"the attention seen is over {sizes} tokens, fewer than the {gh}×{gw} patches of "
                f"a {layout.image_size[0]}×{layout.image_size[1]} image with "
                f"{layout.patch_size}-pixel patches; "
                + setting_hint({"patch_size": "P", "image_size": "N"})
            )
        tokens = counts.most_common(1)[0][0]
    layers = [a for a in seen if a.shape[-1] == tokens]
    if not layers:
        prefixes = sorted({n - gh * gw for n in sizes if n >= gh * gw})
        raise ModelCodeError(
            f"no attention over {tokens} tokens was seen (sizes seen: {sizes}); "
            + setting_hint({"num_prefix_tokens": str(prefixes[0]) if prefixes else "K"})
        )
    if len(layers) < len(seen):
        notes.append(
            f"{len(seen) - len(layers)} attention tensor(s) over other token counts were left out"
        )
    return layers, tokens


def _per_matrix_hint(shapes: list[tuple[int, ...]]) -> str:
    """For attention computed on one (N, N) matrix at a time (loops over images and heads)."""
    if not any(len(s) == 2 and s[0] == s[1] for s in shapes):
        return ""
    return (
        "; the softmaxes over (N, N) matrices look like attention computed one image and one "
        "head at a time: compute it batched, as one softmax over (B, heads, N, N) scores, to "
        "open it"
    )


@dataclass(frozen=True)
class Grouping:
    """How attention computed one head (and one image) at a time forms layers, and its note."""

    heads: HeadPlan | None = None
    matrices: MatrixPlan | None = None
    note: str = ""


def group_heads(
    inner: nn.Module, layout: PatchLayout, run: RawRun, spec: ModelCodeSpec, file: Path
) -> tuple[RawRun, Grouping]:
    """Attention computed one head at a time, grouped into layers by the modules holding it
    (``plan_heads``) and probed again with the grouping; the run as it was and an empty
    Grouping for a model that computes its heads together."""
    if not run.log.attentions or run.watch is None:
        return run, Grouping()
    _, tokens = _attention_layers(run, inner, layout, spec, [])
    blocks = block_containers(run.watch, tokens, run.rows)
    planned = plan_heads(run.log, inner, blocks, tokens, spec.name) or one_per_layer(
        run.log, tokens
    )
    if planned is None:
        return run, Grouping()
    plan, note = planned
    # heads grouped as one layer must not read each other's result, and listed heads must
    # fill the projection's input in their list order
    with torch.enable_grad(), watch_concat(inner, plan.lists) as concat:
        probe = _probe(inner, layout, spec.name, file, gradients=True)
    check_side_by_side(probe.log, plan, spec.name)
    concat.check(spec.name)
    sources = {run.log.sources[i] for i in plan.spots}
    if ONE_MATRIX not in sources:
        return _probe(inner, layout, spec.name, file, plan), Grouping(plan, None, note)
    if sources != {ONE_MATRIX}:
        raise ModelCodeError(
            f"{spec.name} computes some attention one image and one head at a time and some "
            "one head at a time for the whole batch: vitviz can't tell its layers apart"
        )
    matrices = matrix_plan(inner, layout, plan, tokens, spec.name)
    order = "image by image" if matrices.by_image else "head by head"
    note = (
        note.replace("one head at a time", "one image and one head at a time").replace(
            "one-head softmaxes", "(N, N) softmaxes on one image"
        )
        + f"; checked on a batch of 2 images: computed {order}, each image's as when run alone"
    )
    return _probe(inner, layout, spec.name, file, matrices=matrices), Grouping(None, matrices, note)


def make_config(
    inner: nn.Module,
    layout: PatchLayout,
    run: RawRun,
    spec: ModelCodeSpec,
    notes: list[str],
    grouping: Grouping | None = None,
) -> ModelCodeConfig:
    """Depth, heads, prefix tokens, classes and width from one captured forward pass."""
    logits = run.logits
    if logits.ndim != 2 or logits.shape[0] != 1:
        raise ModelCodeError(
            f"{spec.name} returned a tensor of shape {tuple(logits.shape)} for one image; "
            "vitviz needs logits of shape (batch, classes)"
        )
    if run.reading.note():
        notes.append(run.reading.note())
    layers, tokens = _attention_layers(run, inner, layout, spec, notes)
    heads = {a.shape[1] for a in layers}
    if len(heads) > 1:
        raise ModelCodeError(f"the attention layers have different head counts {sorted(heads)}")
    _refuse_heads_as_layers(run, len(layers), heads, tokens, spec.name)
    width = pick_blocks_dim(run, len(layers), tokens)
    if not width:
        notes.append("block outputs were not found: token norms are shown as zero")
    conv = patch_conv(inner)
    gh, gw = layout.image_size[0] // layout.patch_size, layout.image_size[1] // layout.patch_size
    prefix = tokens - gh * gw
    sources = Counter(run.log.sources)
    notes.append(
        f"attention captured from {', '.join(f'{n} {s}' for s, n in sources.items())}; "
        f"patch size {layout.patch_size} from {layout.source}; "
        f"{prefix} prefix token(s) before {gh}×{gw} patches"
    )
    return ModelCodeConfig(
        image_size=layout.image_size,
        patch_size=layout.patch_size,
        num_classes=int(logits.shape[1]),
        depth=len(layers),
        heads=heads.pop(),
        dim=width or (conv.out_channels if conv is not None else 0),
        num_prefix_tokens=prefix,
        in_channels=layout.in_channels,
        source=spec.target,
        outputs=run.reading.kind,
        output_path=run.reading.path,
        head_spots=tuple((record, *spot) for record, spot in sorted(_spots(grouping).items())),
        matrix_heads=grouping.matrices.heads if grouping and grouping.matrices else 0,
        matrix_by_image=grouping.matrices.by_image if grouping and grouping.matrices else True,
    )


def _spots(grouping: Grouping | None) -> dict[int, tuple[int, int, int]]:
    return grouping.heads.spots if grouping is not None and grouping.heads is not None else {}


def _refuse_heads_as_layers(
    run: RawRun, depth: int, heads: set[int], tokens: int, name: str
) -> None:
    """One-head attention tensors k times as many as the model's blocks are its heads computed
    one at a time ((B, N, N) each): shown as layers they would be a false picture."""
    if heads != {1} or run.watch is None:
        return
    for blocks in block_counts(run.watch, tokens, run.rows):
        if depth > blocks and depth % blocks == 0:
            raise ModelCodeError(
                f"{name} computes its attention one head at a time: {depth} one-head "
                f"(B, N, N) softmaxes in {blocks} blocks ({depth // blocks} per block), which "
                "vitviz can't tell from layers; compute the heads together as one softmax over "
                "(B, heads, N, N) scores (or over (B·heads, N, N)) to open it"
            )


def pick_blocks_dim(run: RawRun, depth: int, tokens: int) -> int:
    """Token width D of the block outputs, 0 when they can't be found."""
    hidden = run.blocks(depth, tokens, 1)
    return int(hidden[0].shape[-1]) if hidden else 0


def _class_names(
    spec: ModelCodeSpec, num_classes: int, weights: FoundWeights | None, notes: list[str]
) -> list[str]:
    """The settings' names, else the checkpoint's, else 'class 0..n-1'."""
    names = list(spec.class_names) if spec.class_names is not None else None
    if names is None and spec.class_names_file is not None:
        names = read_class_names(spec.class_names_file)
    if names is None and weights is not None and weights.class_names is not None:
        if len(weights.class_names) == num_classes:
            return weights.class_names
        notes.append(
            f"the checkpoint's {len(weights.class_names)} class names don't fit the model's "
            f"{num_classes} outputs: not used"
        )
    if names is None:
        return default_class_names(num_classes)
    if len(names) != num_classes:
        raise ModelCodeError(
            f"{len(names)} class names were given for a model with {num_classes} classes"
        )
    return names


def _mean_std(
    spec: ModelCodeSpec, arguments: dict[str, Any], name: str, channels: int, notes: list[str]
) -> tuple[float, ...]:
    """The user's value, else the constructor argument (``mean`` / ``image_mean``), else 0.5;
    one number or one per channel."""
    given = getattr(spec, name)
    if given is not None:
        return given
    for key in (name, f"image_{name}", f"norm_{name}"):
        value = arguments.get(key)
        numbers = isinstance(value, (list, tuple)) and len(value) in (1, channels)
        if numbers and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            notes.append(f"{name} {list(value)} from the argument {key}")
            return tuple(float(v) for v in value)
    notes.append(f"{name} not given: 0.5 per channel was used")
    return DEFAULT_MEAN_STD


def _preprocessing(
    spec: ModelCodeSpec, arguments: dict[str, Any], layout: PatchLayout, notes: list[str]
) -> Preprocessing:
    """Centre crop at the model's image size (the short side resized to it), mean / std, and
    the model's channels (a one-channel model gets the image's grayscale)."""
    c = layout.in_channels
    if c != 3:
        notes.append(
            f"{c}-channel inputs (from {layout.channels_from}): images are fed as grayscale"
        )
    try:
        return Preprocessing(
            image_size=layout.image_size,
            resize="crop",
            crop_pct=1.0,
            mean=_mean_std(spec, arguments, "mean", c, notes),
            std=_mean_std(spec, arguments, "std", c, notes),
            channels=c,
        )
    except ValueError as exc:  # e.g. three means for a one-channel model
        raise ModelCodeError(f"{exc} (the model takes {c}-channel inputs)") from exc


def load_model_code(spec: ModelCodeSpec) -> LoadedModel:
    """Import ``spec.file``, build ``spec.name(**spec.args)``, load the state dict, probe it.

    Raises ModelCodeError (a ValueError) with a short message for every expected mistake.
    """
    file = spec.file.expanduser()
    module = import_model_file(file)
    file = Path(module.__file__ or file)
    factory = find_factory(module, spec.name, file)
    held, info = None, None  # the checkpoint's object, read first where the constructor needs it
    if spec.checkpoint is not None and needs_more(factory, spec.args):
        held = read_weights_file(spec.checkpoint.expanduser())
        info = read_training_info(held)
    args, args_notes = constructor_args(factory, spec.args, info)
    inner = build_module(factory, spec.name, args, file)
    notes: list[str] = []
    weights = None
    if spec.checkpoint is not None:
        params = parameter_names(factory)
        path = spec.checkpoint.expanduser()
        held = read_weights_file(path) if held is None else held
        info = read_training_info(held) if info is None else info
        weights = find_weights(inner, path, spec.name, params, held)
        inner.load_state_dict(weights.state, strict=True)
        notes += weights.notes + info.notes
    else:
        notes.append("no state dict given: the weights are the model's own initialisation")
    notes += args_notes
    inner.eval()
    arguments = effective_args(factory, args)
    size, size_from = spec.image_size, "the settings"
    if size is None and weights is not None and weights.image_size is not None:
        size, size_from = weights.image_size, "the checkpoint"

    side = _claiming_side(inner)  # a kind that opens this module its own way, or None

    def layout_and_probe(model: nn.Module) -> tuple[PatchLayout, RawRun | None]:
        layout = find_layout(
            model, arguments, spec.patch_size, size, file, spec.num_prefix_tokens, size_from
        )
        if side is not None:
            return layout, None
        return layout, _probe(model, layout, spec.name, file)

    def padded(exc: FixedBatchError, fixed: FixedBatch, layout: PatchLayout) -> FixedBatch:
        """The model run padded to the batch it demands, its rows checked not to mix."""
        if not fixed.check_rows(layout.in_channels, layout.image_size):
            raise ModelCodeError(f"{exc}; padding the batch won't do: its rows mix") from exc
        notes.append(
            f"the forward pass fixes the batch size at {exc.batch} ({exc.where}): vitviz runs "
            f"each image with {exc.batch - 1} copies of it and keeps its own row (checked: the "
            "rows don't mix)"
        )
        return fixed

    try:
        layout, run = layout_and_probe(inner)
    except FixedBatchError as exc:  # run it padded to the batch it demands, keep the first rows
        fixed = FixedBatch(inner, exc.batch, exc.where)
        layout, run = layout_and_probe(fixed)
        inner = padded(exc, fixed, layout)
    notes.append(layout.size_note)
    if side is not None:
        try:
            return _load_by_kind(side, inner, layout, spec, file, arguments, notes, weights)
        except FixedBatchError as exc:  # a kind's probe found it: the same padding
            if isinstance(inner, FixedBatch):
                raise
            inner = padded(exc, FixedBatch(inner, exc.batch, exc.where), layout)
            return _load_by_kind(side, inner, layout, spec, file, arguments, notes, weights)
    assert run is not None  # probed: no kind claimed the module
    run, grouping = group_heads(inner, layout, run, spec, file)
    if grouping.note:
        notes.append(grouping.note)
    config = make_config(inner, layout, run, spec, notes, grouping)
    preprocessing = _preprocessing(spec, arguments, layout, notes)
    model = CapturedModel(inner, config).eval()
    return _loaded(model, spec, file, preprocessing, notes, weights)


def _loaded(
    model: nn.Module,
    spec: ModelCodeSpec,
    file: Path,
    preprocessing: Preprocessing,
    notes: list[str],
    weights: FoundWeights | None = None,
) -> LoadedModel:
    """The LoadedModel of a model from code (the generic CapturedModel or a kind's wrapped model:
    both duck-typed), its provenance the file, the class and the arguments."""
    return LoadedModel(
        model=model,  # type: ignore[arg-type]
        class_names=_class_names(spec, model.config.num_classes, weights, notes),
        preprocessing=preprocessing,
        family=FAMILY,
        path=file,
        provenance={
            "model_code": f"{file}:{spec.name}",
            "args": dict(spec.args),
            "state_dict": str(spec.checkpoint) if spec.checkpoint else None,
        },
        notes=notes,
        resolved_kind=kind_of(model),  # a model from a user's code enters here (DESIGN §3)
    )


def _claiming_side(model: nn.Module) -> ModelCodeSide | None:
    """The model-code side of the first kind that claims ``model`` (e.g. a Swin's, for window
    attention), None: vitviz's generic capture (a ViT) opens it."""
    sides = (kind.model_code for kind in all_kinds() if kind.model_code is not None)
    return next((side for side in sides if side.claims(model)), None)


def _load_by_kind(
    side: ModelCodeSide,
    inner: nn.Module,
    layout: PatchLayout,
    spec: ModelCodeSpec,
    file: Path,
    arguments: dict[str, Any],
    notes: list[str],
    weights: FoundWeights | None = None,
) -> LoadedModel:
    """A module a kind claims, wrapped by it (e.g. a Swin's ``SwinCodeModel``)."""
    request = CodeModelRequest(
        image_size=layout.image_size,
        patch_size=layout.patch_size,
        patch_source=layout.source,
        in_channels=layout.in_channels,
        target=spec.target,
        settings={k: v for k, v in spec.kind_settings.items() if k in side.settings},
    )
    try:
        model, note = side.wrap(inner, request)
    except ModelCodeError:
        raise
    except Exception as exc:
        raise probe_run_error(exc, file, spec.name, layout.in_channels, layout.image_size) from exc
    notes.append(note)
    preprocessing = _preprocessing(spec, arguments, layout, notes)
    return _loaded(model, spec, file, preprocessing, notes, weights)
