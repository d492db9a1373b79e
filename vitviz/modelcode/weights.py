"""The model's weights inside whatever a training script saved, found by the model's own names.

A training checkpoint is a dict holding the state dict under some key (``model_state``,
``state_dict``, ``model``, ``net``, ``ema``, ... or nested deeper) beside what the script kept:
class names (``classes``, ``class_to_idx``, ``idx_to_class``), the image size (``img_size``,
``image_size``), a config, the epoch, optimizer state. ``find_weights`` takes the dict whose
keys are exactly the model's parameter and buffer names (after removing a wrapper prefix such as
``module.``) and reads the class names and image size beside it. The file is read with
vitviz's safe reader (weights_only): nothing in it runs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.reading import checked_state, read_checkpoint_object
from vitviz.modelcode.errors import ModelCodeError
from vitviz.modelcode.layout import as_pair

MAX_DEPTH = 4  # how deep dicts are searched for the state dict
_WRAPPER_PREFIXES = ("module.", "_orig_mod.")
_PREFERRED = ("model_state", "model_state_dict", "state_dict", "model", "net", "network")
_AVERAGED = re.compile(r"ema|swa|averaged", re.IGNORECASE)  # a weight average: the last choice
_NAMES_KEYS = ("classes", "class_names", "class_to_idx", "idx_to_class", "labels")
_SIZE_KEYS = ("img_size", "image_size", "input_size", "resolution")


@dataclass
class FoundWeights:
    """The state dict for the model and what the checkpoint said beside it."""

    state: dict[str, Tensor]
    where: str  # "the top level" or "the key 'model_state'"
    class_names: list[str] | None = None
    image_size: tuple[int, int] | None = None
    notes: list[str] = field(default_factory=list)  # where each thing came from


def _where(path: tuple[str, ...]) -> str:
    return "the top level" if not path else "the key " + "/".join(repr(k) for k in path)


def _tensor_dicts(obj: Any, path: tuple = ()) -> Iterator[tuple[tuple, dict]]:
    """(key path, dict) for every dict of tensors in ``obj``, outer first."""
    if not isinstance(obj, dict) or len(path) > MAX_DEPTH:
        return
    tensors = {k: v for k, v in obj.items() if isinstance(k, str) and isinstance(v, Tensor)}
    if tensors:
        yield path, tensors
    for key, value in obj.items():
        if isinstance(value, dict):
            yield from _tensor_dicts(value, (*path, key))


def _renamed(state: dict[str, Tensor], own: set[str]) -> tuple[dict[str, Tensor], str]:
    """``state`` with a wrapper prefix shared by every key removed when that gives ``own``."""
    if set(state) == own:
        return state, ""
    for prefix in _WRAPPER_PREFIXES:
        if all(k.startswith(prefix) for k in state):
            renamed, more = _renamed({k[len(prefix) :]: v for k, v in state.items()}, own)
            return renamed, prefix + more
    firsts = {k.split(".", 1)[0] for k in state}
    if len(firsts) == 1 and all("." in k for k in state):
        stripped = {k.split(".", 1)[1]: v for k, v in state.items()}
        if set(stripped) == own:
            return stripped, f"{firsts.pop()}."
    return state, ""


def _rank(path: tuple[str, ...]) -> int:
    """Which of several fitting state dicts to take: the trained model's by its usual key,
    then any other, then a weight average (EMA, SWA) last."""
    last = str(path[-1]) if path else ""
    if any(_AVERAGED.search(str(k)) for k in path):
        return len(_PREFERRED) + 1
    return _PREFERRED.index(last) if last in _PREFERRED else len(_PREFERRED)


def _parent(obj: Any, path: tuple[str, ...]) -> list[dict]:
    """The dicts from the top down to the one holding the state dict (its siblings' home)."""
    chain = [obj]
    for key in path[:-1]:
        obj = obj[key]
        chain.append(obj)
    return chain[::-1]  # nearest first


def _class_names(value: Any, key: str) -> list[str] | None:
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
        return list(value)
    if not isinstance(value, dict) or not value:
        return None
    pairs: dict[int, str] = {}
    for k, v in value.items():
        name, index = (k, v) if key == "class_to_idx" else (v, k)
        try:
            pairs[int(index)] = str(name)
        except (TypeError, ValueError):
            return None
    if sorted(pairs) != list(range(len(pairs))):
        return None
    return [pairs[i] for i in range(len(pairs))]


def _beside(found: FoundWeights, homes: list[dict]) -> None:
    """Class names and image size from the dicts that hold the state dict, nearest first."""
    for home in homes:
        for key in _NAMES_KEYS:
            names = _class_names(home.get(key), key)
            if names is not None and found.class_names is None:
                found.class_names = names
                found.notes.append(f"{len(names)} class names from the checkpoint's {key!r}")
        for key in _SIZE_KEYS:
            size = as_pair(home.get(key))
            if size is not None and found.image_size is None:
                found.image_size = size
                found.notes.append(f"image size {size[0]}×{size[1]} from the checkpoint's {key!r}")


CLASS_ARGS = ("num_classes", "n_classes", "classes", "num_class", "n_class", "out_d", "out_dim")
DEPTH_ARGS = ("depth", "num_layers", "n_layers", "n_blocks", "num_blocks", "layers", "blocks")
_INDEXED = re.compile(r"^(.*?)\.(\d+)\.")


def _depths(keys: Any) -> dict[str, int]:
    """{container prefix: 1 + its largest index} over keys such as 'blocks.5.attn.qkv.weight'."""
    out: dict[str, int] = {}
    for k in keys:
        m = _INDEXED.match(k)
        if m:
            out[m.group(1)] = max(out.get(m.group(1), 0), int(m.group(2)) + 1)
    return out


def suggested_args(
    state: dict[str, Tensor], own: dict[str, Tensor], params: set[str]
) -> dict[str, int]:
    """Constructor arguments the file's shapes say, by the constructor's own parameter names:
    the class count of the last weight matrix, the depth of the block list."""
    out: dict[str, int] = {}
    matrices = [k for k, v in own.items() if v.ndim == 2]
    last = matrices[-1] if matrices else None
    if last in state and state[last].ndim == 2 and state[last].shape[1] == own[last].shape[1]:
        n = int(state[last].shape[0])
        key = next((a for a in CLASS_ARGS if a in params), None)
        if key and n != own[last].shape[0]:
            out[key] = n
    theirs, ours = _depths(state), _depths(own)
    for prefix, depth in theirs.items():
        key = next((a for a in DEPTH_ARGS if a in params), None)
        if key and prefix in ours and ours[prefix] != depth:
            out[key] = depth
            break
    return out


def _mismatch(
    state: dict[str, Tensor],
    own: dict[str, Tensor],
    path: tuple[str, ...],
    file: str,
    name: str,
    params: set[str],
) -> ModelCodeError:
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    mismatched = [
        f"{k} {tuple(state[k].shape)} in the file, {tuple(own[k].shape)} in the model"
        for k in own
        if k in state and tuple(state[k].shape) != tuple(own[k].shape)
    ]
    parts = []
    if missing:
        parts.append(f"missing keys ({len(missing)}): {_listed(missing)}")
    if unexpected:
        parts.append(f"unexpected keys ({len(unexpected)}): {_listed(unexpected)}")
    if mismatched:
        parts.append(f"shape mismatches ({len(mismatched)}): {_listed(mismatched, 4)}")
    where = "" if not path else f" (the state dict under {_where(path)[8:]})"
    said = suggested_args(state, own, params)
    fix = (
        f"; its shapes say --model-args '{json.dumps(said)}'"
        if said
        else "; give the arguments it was trained with in --model-args"
    )
    return ModelCodeError(
        f"{file}{where} does not match the model {name} built with these arguments: "
        + "; ".join(parts)
        + fix
    )


def _no_weights(obj: Any, path: Path, name: str, dicts: int) -> ModelCodeError:
    kind = type(obj).__name__
    keys = ", ".join(map(repr, list(obj)[:8])) if isinstance(obj, dict) else ""
    held = (
        f"{dicts} dict(s) of tensors, none with the parameter names of {name}"
        if dicts
        else ("no model weights")
    )
    return ModelCodeError(
        f"{path.name} holds a {kind} with {held}"
        + (f" (its keys: {keys})" if keys else "")
        + "; give the file that torch.save(model.state_dict(), ...) wrote for this model"
    )


def _listed(keys: list[str], limit: int = 8) -> str:
    shown = ", ".join(keys[:limit])
    return shown + (f" … ({len(keys)} in all)" if len(keys) > limit else "")


def read_weights_file(path: Path) -> Any:
    """What ``path`` holds, read by vitviz's safe reader; ModelCodeError when it can't be."""
    try:
        return read_checkpoint_object(path)
    except CheckpointError as exc:
        raise ModelCodeError(str(exc)) from exc


def find_weights(
    model: nn.Module, path: Path, name: str, params: set[str] | None = None, obj: Any = None
) -> FoundWeights:
    """The state dict in ``path`` (``obj``: what it holds, when already read) whose names and
    shapes are the model's, and what sits beside it. Raises ModelCodeError naming what differs
    (from the closest candidate) and, by the constructor's parameter names ``params``, the
    arguments the file's shapes say."""
    if obj is None:
        obj = read_weights_file(path)
    own = model.state_dict()
    names = set(own)
    candidates = []
    for key_path, tensors in _tensor_dicts(obj):
        state, prefix = _renamed(tensors, names)
        shapes_fit = set(state) == names and all(
            tuple(state[k].shape) == tuple(own[k].shape) for k in names
        )
        candidates.append((key_path, state, prefix, shapes_fit))
    fitting = sorted((c for c in candidates if c[3]), key=lambda c: (_rank(c[0]), len(c[0])))
    if not fitting:
        closest = max(candidates, key=lambda c: len(set(c[1]) & names), default=None)
        if closest is None or not set(closest[1]) & names:
            raise _no_weights(obj, path, name, len(candidates))
        raise _mismatch(closest[1], own, closest[0], path.name, name, params or set())
    key_path, state, prefix, _ = fitting[0]
    try:  # the same gate as every checkpoint family's: dense tensors of convertible dtypes
        state = checked_state(state, path.name)
    except CheckpointError as exc:
        raise ModelCodeError(str(exc)) from exc
    found = FoundWeights(state=state, where=_where(key_path))
    if key_path:
        found.notes.append(f"weights from {found.where} of the checkpoint")
    if len(fitting) > 1:
        others = ", ".join(_where(c[0]) for c in fitting[1:])
        found.notes.append(
            f"{others} also fit{'s' if len(fitting) == 2 else ''} the model: not used"
        )
    if prefix:
        found.notes.append(f"state dict keys had the prefix {prefix!r}; it was removed")
    if isinstance(obj, dict):
        _beside(found, _parent(obj, key_path) if key_path else [obj])
    return found
