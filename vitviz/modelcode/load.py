"""load_model_code(spec) -> LoadedModel: the user's file, imported, built, weighted, probed."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.loaded import LoadedModel, default_class_names
from vitviz.checkpoints.reading import read_checkpoint
from vitviz.imaging import Preprocessing
from vitviz.modelcode.adapter import CapturedModel, ModelCodeConfig, RawRun, run_captured
from vitviz.modelcode.blocks import pick_blocks
from vitviz.modelcode.errors import ModelCodeError, describe_exception
from vitviz.modelcode.importing import (
    build_module,
    effective_args,
    find_factory,
    import_model_file,
)
from vitviz.modelcode.layout import PatchLayout, find_layout, patch_conv
from vitviz.modelcode.spec import ModelCodeSpec, read_class_names
from vitviz.modelcode.swin_code import swin_code_model, window_attention_modules

FAMILY = "model-code"
DEFAULT_MEAN_STD = (0.5, 0.5, 0.5)
_LOOKED_AT = (
    ("Linear", nn.Linear),
    ("Conv2d", nn.Conv2d),
    ("LayerNorm", nn.LayerNorm),
    ("MultiheadAttention", nn.MultiheadAttention),
    ("Softmax", nn.Softmax),
)


def _listed(keys: list[str], limit: int = 8) -> str:
    shown = ", ".join(keys[:limit])
    return shown + (f" … ({len(keys)} in all)" if len(keys) > limit else "")


def _strip_wrapper(state: dict[str, torch.Tensor], own: set[str]) -> tuple[dict, str]:
    """Drop a first key component shared by every key ('model.', 'net.') if that matches."""
    firsts = {k.split(".", 1)[0] for k in state}
    if len(firsts) == 1 and all("." in k for k in state):
        stripped = {k.split(".", 1)[1]: v for k, v in state.items()}
        if set(stripped) == own:
            return stripped, f"{firsts.pop()}."
    return state, ""


def load_state_dict(model: nn.Module, path: Path, name: str, notes: list[str]) -> None:
    """Read ``path`` with vitviz's safe reader and load it strictly, or say what differs."""
    try:
        raw = read_checkpoint(path)
    except CheckpointError as exc:
        raise ModelCodeError(str(exc)) from exc
    own = model.state_dict()
    state, prefix = _strip_wrapper(dict(raw.state), set(own))
    if prefix:
        notes.append(f"state dict keys had the prefix {prefix!r}; it was removed")
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    mismatched = [
        f"{k} {tuple(state[k].shape)} in the file, {tuple(own[k].shape)} in the model"
        for k in own
        if k in state and tuple(state[k].shape) != tuple(own[k].shape)
    ]
    if missing or unexpected or mismatched:
        parts = []
        if missing:
            parts.append(f"missing keys ({len(missing)}): {_listed(missing)}")
        if unexpected:
            parts.append(f"unexpected keys ({len(unexpected)}): {_listed(unexpected)}")
        if mismatched:
            parts.append(f"shape mismatches ({len(mismatched)}): {_listed(mismatched, 4)}")
        raise ModelCodeError(
            f"{path.name} does not match the model {name} built with these arguments: "
            + "; ".join(parts)
        )
    model.load_state_dict(state, strict=True)


def looked_at(model: nn.Module) -> str:
    """'12 Linear, 0 Conv2d, 4 LayerNorm, 0 MultiheadAttention, 0 Softmax' for messages."""
    counts = Counter(
        label for m in model.modules() for label, kind in _LOOKED_AT if isinstance(m, kind)
    )
    return ", ".join(f"{counts[label]} {label}" for label, _ in _LOOKED_AT)


def _probe(inner: nn.Module, layout: PatchLayout, name: str, file: Path) -> RawRun:
    h, w = layout.image_size
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, layout.in_channels, h, w, generator=g)
    try:
        device = next(inner.parameters()).device
    except StopIteration:
        device = torch.device("cpu")
    try:
        with torch.no_grad():
            return run_captured(inner, x.to(device), hidden_states=True)
    except ModelCodeError:
        raise
    except Exception as exc:
        raise ModelCodeError(
            f"running {name} on a 1×{layout.in_channels}×{h}×{w} input failed: "
            f"{describe_exception(exc, file)}"
        ) from exc


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
                f"{layout.patch_size}-pixel patches: check the patch size and image size"
            )
        tokens = counts.most_common(1)[0][0]
    layers = [a for a in seen if a.shape[-1] == tokens]
    if not layers:
        raise ModelCodeError(
            f"no attention over {tokens} tokens was seen (sizes seen: {sizes}); "
            "check num_prefix_tokens"
        )
    if len(layers) < len(seen):
        notes.append(
            f"{len(seen) - len(layers)} attention tensor(s) over other token counts were left out"
        )
    return layers, tokens


def make_config(
    inner: nn.Module, layout: PatchLayout, run: RawRun, spec: ModelCodeSpec, notes: list[str]
) -> ModelCodeConfig:
    """Depth, heads, prefix tokens, classes and width from one captured forward pass."""
    logits = run.logits
    if logits.ndim != 2 or logits.shape[0] != 1:
        raise ModelCodeError(
            f"{spec.name} returned a tensor of shape {tuple(logits.shape)} for one image; "
            "vitviz needs logits of shape (batch, classes)"
        )
    layers, tokens = _attention_layers(run, inner, layout, spec, notes)
    heads = {a.shape[1] for a in layers}
    if len(heads) > 1:
        raise ModelCodeError(f"the attention layers have different head counts {sorted(heads)}")
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
    )


def pick_blocks_dim(run: RawRun, depth: int, tokens: int) -> int:
    """Token width D of the block outputs, 0 when they can't be found."""
    if run.watch is None:
        return 0
    hidden = pick_blocks(run.watch, depth, tokens, 1)
    return int(hidden[0].shape[-1]) if hidden else 0


def _class_names(spec: ModelCodeSpec, num_classes: int) -> list[str]:
    names = list(spec.class_names) if spec.class_names is not None else None
    if names is None and spec.class_names_file is not None:
        names = read_class_names(spec.class_names_file)
    if names is None:
        return default_class_names(num_classes)
    if len(names) != num_classes:
        raise ModelCodeError(
            f"{len(names)} class names were given for a model with {num_classes} classes"
        )
    return names


def _mean_std(
    spec: ModelCodeSpec, arguments: dict[str, Any], name: str, notes: list[str]
) -> tuple[float, float, float]:
    """The user's value, else the constructor argument (``mean`` / ``image_mean``), else 0.5."""
    given = getattr(spec, name)
    if given is not None:
        return given
    for key in (name, f"image_{name}", f"norm_{name}"):
        value = arguments.get(key)
        numbers = isinstance(value, (list, tuple)) and len(value) == 3
        if numbers and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            notes.append(f"{name} {list(value)} from the argument {key}")
            return (float(value[0]), float(value[1]), float(value[2]))
    notes.append(f"{name} not given: 0.5 per channel was used")
    return DEFAULT_MEAN_STD


def _preprocessing(
    spec: ModelCodeSpec, arguments: dict[str, Any], layout: PatchLayout, notes: list[str]
) -> Preprocessing:
    """Centre crop at the model's image size (the short side resized to it), mean / std."""
    return Preprocessing(
        image_size=layout.image_size,
        resize="crop",
        crop_pct=1.0,
        mean=_mean_std(spec, arguments, "mean", notes),
        std=_mean_std(spec, arguments, "std", notes),
    )


def load_model_code(spec: ModelCodeSpec) -> LoadedModel:
    """Import ``spec.file``, build ``spec.name(**spec.args)``, load the state dict, probe it.

    Raises ModelCodeError (a ValueError) with a short message for every expected mistake.
    """
    file = spec.file.expanduser()
    module = import_model_file(file)
    file = Path(module.__file__ or file)
    factory = find_factory(module, spec.name, file)
    inner = build_module(factory, spec.name, spec.args, file)
    notes: list[str] = []
    if spec.checkpoint is not None:
        load_state_dict(inner, spec.checkpoint.expanduser(), spec.name, notes)
    else:
        notes.append("no state dict given: the weights are the model's own initialisation")
    inner.eval()
    arguments = effective_args(factory, spec.args)
    layout = find_layout(
        inner, arguments, spec.patch_size, spec.image_size, file, spec.num_prefix_tokens
    )
    notes.append(layout.size_note)
    if window_attention_modules(inner):
        return _load_swin(inner, layout, spec, file, arguments, notes)
    run = _probe(inner, layout, spec.name, file)
    config = make_config(inner, layout, run, spec, notes)
    preprocessing = _preprocessing(spec, arguments, layout, notes)
    model = CapturedModel(inner, config).eval()
    return _loaded(model, spec, file, preprocessing, notes)


def _loaded(
    model: nn.Module,
    spec: ModelCodeSpec,
    file: Path,
    preprocessing: Preprocessing,
    notes: list[str],
) -> LoadedModel:
    """The LoadedModel of a model from code (a ViT's CapturedModel or a SwinCodeModel: both
    duck-typed), its provenance the file, the class and the arguments."""
    return LoadedModel(
        model=model,  # type: ignore[arg-type]
        class_names=_class_names(spec, model.config.num_classes),
        preprocessing=preprocessing,
        family=FAMILY,
        path=file,
        provenance={
            "model_code": f"{file}:{spec.name}",
            "args": dict(spec.args),
            "state_dict": str(spec.checkpoint) if spec.checkpoint else None,
        },
        notes=notes,
    )


def _load_swin(
    inner: nn.Module,
    layout: PatchLayout,
    spec: ModelCodeSpec,
    file: Path,
    arguments: dict[str, Any],
    notes: list[str],
) -> LoadedModel:
    """A model with window-attention modules, opened as a Swin (``SwinCodeModel``)."""
    try:
        model = swin_code_model(
            inner, layout.image_size, layout.patch_size, spec.swin_windows, spec.target
        )
    except ModelCodeError:
        raise
    except Exception as exc:
        h, w = layout.image_size
        raise ModelCodeError(
            f"running {spec.name} on a 1×3×{h}×{w} input failed: {describe_exception(exc, file)}"
        ) from exc
    blocks = len(model.attention_names)
    notes.append(
        f"Swin: window attention captured in {blocks} blocks; patch size {layout.patch_size} "
        f"from {layout.source}; window layout from "
        + ("the settings" if spec.swin_windows is not None else "the modules' attributes")
    )
    return _loaded(model, spec, file, _preprocessing(spec, arguments, layout, notes), notes)
