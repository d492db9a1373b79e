"""load_checkpoint: any supported checkpoint file or folder -> LoadedModel (the one model, eval).

Dispatch: a vitviz native file loads directly; a folder with config.json is read as a Hugging
Face or timm folder; anything else is matched against the family registry by its key names
and converted (see ``vitviz.checkpoints.families``).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.families import Family, Source, find_family
from vitviz.checkpoints.families.timm_names import known_name
from vitviz.checkpoints.folders import (
    FOLDER_ACCEPTED,
    NO_PROCESSOR,
    Beside,
    beside,
    read_folder,
)
from vitviz.checkpoints.hub_fetch import resolve_reference
from vitviz.checkpoints.library_check import check_or_refuse
from vitviz.checkpoints.loaded import LoadedModel
from vitviz.checkpoints.native import is_native, load_native
from vitviz.checkpoints.reading import ACCEPTED, read_checkpoint, to_float
from vitviz.checkpoints.sidecar import user_settings
from vitviz.checkpoints.timm_folder import MAX_MODEL_SIDE
from vitviz.checkpoints.training_args import training_config
from vitviz.checkpoints.unmodelled import unmodelled
from vitviz.imaging import Preprocessing
from vitviz.kindapi import get_kind

# What user data can make a converter raise (wrong types, shapes, values in the file or the
# settings). Caught at this one boundary and re-raised as a CheckpointError naming the file,
# with the original as __cause__; AttributeError, NameError, ImportError (bugs) are not caught.
_FROM_USER_DATA = (
    KeyError,
    IndexError,
    TypeError,
    ValueError,
    ArithmeticError,
    RuntimeError,
    struct.error,
)
_F32 = torch.finfo(torch.float32)


def load_checkpoint(
    path: str | Path,
    config: Mapping[str, Any] | None = None,
    *,
    dtype: torch.dtype = torch.float32,
    offline: bool | None = None,
) -> LoadedModel:
    """Open a checkpoint (file or model folder) safely and convert it to the one model.

    ``config`` supplies what the weights can't say (ViTConfig fields, ``class_names``,
    ``preprocessing``); it updates ``<checkpoint>.vitviz.json`` when that file is there.
    ``dtype``: the floating-point type of the model's weights (float16 and bfloat16 files
    load as float32 by default; ``analyze`` needs float32).
    ``path`` may be a Hugging Face model id (``org/name``, ``org/name@revision``): opened from
    the hub cache, else downloaded into it (``checkpoints.hub_fetch``), unless ``offline`` (or
    ``HF_HUB_OFFLINE=1``) forbids it.
    Raises CheckpointError with a one-line message for anything that can't be opened.
    """
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise TypeError(f"dtype must be a floating-point torch.dtype, got {dtype!r}")
    p = resolve_reference(path, offline=offline)  # a cache folder or a model id: what opens
    try:
        loaded = _load(p, config, dtype)
    except CheckpointError:
        raise
    except OSError as exc:
        raise CheckpointError(f"{p.name} can't be read: {exc.strerror or exc}.") from exc
    except MemoryError as exc:
        raise CheckpointError(f"{p.name}: not enough memory to load these weights.") from exc
    except _FROM_USER_DATA as exc:
        short_of = _allocation(exc)
        if short_of is not None:  # torch's allocator, e.g. the library check's probe
            size = f" (torch could not allocate {short_of / 2**30:.1f} GB)" if short_of else ""
            raise CheckpointError(
                f"{p.name}: not enough memory to load and check these weights{size}."
            ) from exc
        raise CheckpointError(
            f"{p.name}: vitviz could not convert these weights ({type(exc).__name__}: "
            f"{_short(exc)}). {ACCEPTED}"
        ) from exc
    problem = preprocessing_problem(loaded.preprocessing, loaded.config.patch_size)
    if problem is not None:
        raise CheckpointError(f"{p.name}: {problem}.")
    loaded.notes.extend(_non_finite_notes(loaded.model))
    return loaded


def model_size_problem(config: Any) -> str | None:
    """Why a model's input size can't be run (one phrase: larger than ``MAX_MODEL_SIDE`` a
    side, which would allocate GBs for one image, or smaller than its patch), or None."""
    h, w = config.image_size
    if max(h, w) > MAX_MODEL_SIDE:
        return (
            f"its input size {h}×{w} is larger than vitviz runs ({MAX_MODEL_SIDE} pixels a side "
            "at most)"
        )
    patch = getattr(config, "patch_size", 1)
    if isinstance(patch, int) and patch > min(h, w):
        return f"its patch size {patch} is larger than its input size {h}×{w}"
    return None


def preprocessing_problem(prep: Preprocessing, patch_size: int) -> str | None:
    """Why ``prep`` can't make inputs for a model with ``patch_size`` (one phrase), or None."""
    h, w = prep.image_size
    if prep.resize != "fit" and (h % patch_size or w % patch_size):
        lo_h, lo_w = max(1, h // patch_size) * patch_size, max(1, w // patch_size) * patch_size
        return (
            f"the preprocessing image size {h}×{w} is not a multiple of the patch size "
            f"{patch_size} (resize {prep.resize!r}); use e.g. {lo_h}×{lo_w}, or resize 'fit'"
        )
    for name, values in (("mean", prep.mean), ("std", prep.std)):
        if any(abs(v) > _F32.max for v in values):
            return f"the preprocessing {name} {list(values)} is beyond float32's range"
    if any(v < _F32.tiny for v in prep.std):
        return f"the preprocessing std {list(prep.std)} is too small for float32"
    return None


def _non_finite_notes(model: torch.nn.Module) -> list[str]:
    """A note naming the weights that hold NaN or infinity (analyses will refuse them)."""
    bad = [k for k, t in model.state_dict().items() if not bool(torch.isfinite(t).all())]
    if not bad:
        return []
    shown = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
    return [f"NaN or infinite values in {shown}: analyses will be refused"]


def _allocation(exc: BaseException) -> int | None:
    """The bytes torch failed to allocate, when ``exc`` says it ran out of memory; else None."""
    text = str(exc)
    if isinstance(exc, torch.OutOfMemoryError) or "can't allocate memory" in text:
        found = re.search(r"allocate (\d+) bytes", text)
        return int(found.group(1)) if found else 0
    return None


def _short(exc: BaseException, limit: int = 160) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _load(p: Path, config: Mapping[str, Any] | None, dtype: torch.dtype) -> LoadedModel:
    """read -> floats as ``dtype`` -> native, or family conversion -> the one model."""
    raw = read_folder(p) if p.is_dir() else read_checkpoint(p)
    cast_notes = to_float(raw.state, dtype, p.name)
    if is_native(raw.metadata):
        loaded = load_native(raw.state, raw.metadata, raw.path)
        loaded.notes.extend(cast_notes)
        return loaded
    found = beside(p) if p.exists() else Beside(None, None, NO_PROCESSOR)
    folder_config, config_from = found.config, None
    if folder_config is None:  # a training checkpoint that names its timm model
        named = training_config(raw.extra, p, known_name)
        if named is not None:
            folder_config, config_from = named
    source = Source(
        state=raw.state,
        path=p,
        extra=raw.extra,
        metadata=raw.metadata,
        folder_config=folder_config,
        preprocessor=found.preprocessor,
        preprocessor_found=found.found,
        user=user_settings(p, config),
        config_from=config_from,
    )
    keys = list(raw.state)
    family, prefix = _find_family_under_prefixes(source)
    if family is None:
        named = unmodelled(keys, source.hf_config)
        if named is not None:
            raise CheckpointError(
                f"{p.name}: this is {named}, which vitviz does not model (refused rather than "
                "shown with another network's numbers)."
            )
        raise CheckpointError(_not_understood(keys, p))
    conversion = family.convert(source)
    size_problem = model_size_problem(conversion.config)
    if size_problem is not None:  # before anything is built or run at that size
        raise CheckpointError(f"{p.name}: {size_problem}.")
    if prefix:
        conversion.notes.insert(0, f"weights read from under the key prefix {prefix!r}")
    conversion.notes.extend(cast_notes)
    kind = get_kind(conversion.kind)
    try:
        model = kind.build_from_state(conversion.config, conversion.state)
    except CheckpointError as exc:  # it can't name the file
        raise CheckpointError(f"{p.name}: {exc}") from exc
    problem = preprocessing_problem(conversion.preprocessing, conversion.config.patch_size)
    if problem is not None:  # before the check runs the model at the sizes it gives
        raise CheckpointError(f"{p.name}: {problem}.")
    check_or_refuse(
        model, p, conversion.reference, conversion.notes, kind, conversion.preprocessing
    )
    return LoadedModel(
        model=model,
        class_names=conversion.class_names,
        preprocessing=conversion.preprocessing,
        family=conversion.family,
        path=p,
        notes=conversion.notes,
        reference=conversion.reference,
        assumed=dict(conversion.assumed),
        resolved_kind=kind,
    )


def _find_family_under_prefixes(source: Source) -> tuple[Family | None, str]:
    """The family of the state dict, or of what sits under a prefix every key shares (e.g. a
    Lightning module's ``model.``), up to two levels deep; the prefix found ("" for none)."""
    stripped = ""
    for _ in range(3):
        family = find_family(source)
        if family is not None:
            return family, stripped
        heads = {k.split(".", 1)[0] for k in source.state}
        if len(heads) != 1 or not all("." in k for k in source.state):
            break
        head = heads.pop() + "."
        for key in list(source.state):  # in place: no second reference to any tensor
            source.state[key[len(head) :]] = source.state.pop(key)
        stripped += head
    return None, stripped


def _not_understood(keys: list[str], p: Path) -> str:
    shown = ", ".join(keys[:5]) + (f" … ({len(keys)} tensors)" if len(keys) > 5 else "")
    extra = f" {FOLDER_ACCEPTED}" if p.is_dir() else ""
    return (
        f"{p.name}: vitviz does not recognise this layout of weights (first keys: {shown}). "
        f"{ACCEPTED}{extra}"
    )
