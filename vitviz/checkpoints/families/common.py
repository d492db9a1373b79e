"""Helpers every family converter shares: taking tensors, fusing q/k/v, finishing the config."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from vitviz.blocks import ViTConfig
from vitviz.checkpoints.assign import few
from vitviz.checkpoints.errors import CheckpointError, MissingSettingsError
from vitviz.checkpoints.families.base import Conversion, Source
from vitviz.checkpoints.labels import resolve_class_names
from vitviz.imaging import Preprocessing

CONFIG_FIELDS = frozenset(f.name for f in dataclasses.fields(ViTConfig))
# patch_order: tutorials. (arch, a timm model name, is taken by the timm converters.)
USER_EXTRAS = frozenset({"class_names", "preprocessing", "patch_order"})

# Heads of the standard ViT sizes, by width (ViT-Ti/S/M/B/L/H/g/G, DINOv2-g).
STANDARD_HEADS = {
    192: 3,
    384: 6,
    512: 8,
    640: 10,
    768: 12,
    1024: 16,
    1280: 16,
    1408: 16,
    1536: 24,
    1664: 16,
}

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
INCEPTION_MEAN = (0.5, 0.5, 0.5)
INCEPTION_STD = (0.5, 0.5, 0.5)

# The settings a kind's family takes beside its config's fields (arch: a timm model name).
KIND_EXTRAS = frozenset({"class_names", "preprocessing", "arch"})


def timm_crop(
    crop_pct: float, mean: Sequence[float] = IMAGENET_MEAN, std: Sequence[float] = IMAGENET_STD
) -> dict[str, Any]:
    """timm's default_cfg preprocessing of a model: a centre crop of ``crop_pct``, bicubic,
    ``mean`` and ``std`` (ImageNet's unless given)."""
    return {
        "resize": "crop",
        "crop_pct": crop_pct,
        "interpolation": "bicubic",
        "mean": mean,
        "std": std,
    }


# The key a library's preprocessing sets beside an ``image_size`` that is only the library's
# evaluation setting (timm's pretrained_cfg input_size), never the model's own size: its value
# names where the size came from (DESIGN §4: the size analysed is the size checked).
SIZE_SAID_BY = "image_size_said_by"


class Taker:
    """Takes tensors out of ``source.state`` (so each original is freed once converted).

    ``take(*names)`` returns the first name present and raises a CheckpointError naming the
    first one when none is; ``maybe(*names)`` returns None instead.
    """

    def __init__(self, source: Source, looks_like: str) -> None:
        self.source = source
        self.state = source.state
        self.looks_like = looks_like

    def __contains__(self, key: str) -> bool:
        return key in self.state

    def maybe(self, *names: str) -> Tensor | None:
        for name in names:
            if name in self.state:
                return self.state.pop(name)
        return None

    def take(self, *names: str) -> Tensor:
        t = self.maybe(*names)
        if t is None:
            raise CheckpointError(
                f"{self.source.name} looks like {self.looks_like}, but {names[0]} is missing."
            )
        return t

    def drop(self, keys: Iterable[str]) -> list[str]:
        """Remove ``keys`` (those present); returns the removed names."""
        gone = [k for k in keys if k in self.state]
        for k in gone:
            del self.state[k]
        return gone

    def refuse_leftovers(self) -> None:
        refuse_leftovers(self.source, self.state, self.looks_like)


def fuse_qkv(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Separate q, k, v projections -> one (3·out, ...) tensor: the one copy a conversion makes."""
    return torch.cat([q, k, v], dim=0)


def block_indices(state: Mapping[str, Tensor], pattern: str) -> list[int]:
    """Sorted block numbers N of keys matching ``pattern`` (a regex with one (\\d+) group)."""
    rx = re.compile(pattern)
    found = {int(m.group(1)) for k in state if (m := rx.match(k))}
    return sorted(found)


def check_depth(source: Source, indices: Sequence[int]) -> int:
    """Blocks must be numbered 0..L-1; returns L."""
    if not indices:
        raise CheckpointError(f"{source.name}: no transformer blocks found.")
    if list(indices) != list(range(len(indices))):
        raise CheckpointError(
            f"{source.name}: transformer blocks are not numbered 0..L-1 "
            f"(found {few([str(i) for i in indices])})."
        )
    return len(indices)


def grid_from_table(n: int) -> tuple[int, int] | None:
    """A square grid with ``n`` cells, or None."""
    if n <= 0:
        return None
    side = math.isqrt(n)
    return (side, side) if side * side == n and n > 0 else None


def standard_heads(dim: int) -> int | None:
    return STANDARD_HEADS.get(dim)


def example_heads(dim: int) -> int:
    """A head count to suggest for width ``dim``: the standard one, else the divisor of ``dim``
    giving heads closest to timm's width of 64, at least 2 where the width allows
    (256 -> 4, 320 -> 5, 896 -> 14, 48 -> 2)."""
    standard = standard_heads(dim)
    if standard is not None:
        return standard
    divisors = [h for h in range(2, dim + 1) if dim % h == 0] or [1]
    return min(divisors, key=lambda h: (abs(dim / h - 64), h))


def need_message(source: Source, looks_like: str, missing: Mapping[str, Any]) -> str:
    """The one-line message naming exactly the settings a sidecar must give."""
    fields = ", ".join(missing)
    example = json.dumps(dict(missing))
    return (
        f"{source.name} looks like {looks_like}; the weights don't say: {fields}. "
        f"Put them in {source.sidecar_name}, e.g. {example} (or give the file with "
        f"--config FILE)."
    )


def ask(
    source: Source,
    looks_like: str,
    required: Mapping[str, Any],
    known: Mapping[str, Any] | None = None,
) -> None:
    """Raise the need message for the ``required`` fields neither known nor given by the user."""
    have = dict(known or {})
    missing = {k: v for k, v in required.items() if k not in source.user and k not in have}
    if missing:
        raise MissingSettingsError(need_message(source, looks_like, missing), missing)


def dropped(keys: Sequence[str], what: str) -> str:
    """A note for tensors left out of the model."""
    return f"dropped {few(list(keys))} ({what})"


def refuse_leftovers(source: Source, state: Mapping[str, Tensor], looks_like: str) -> None:
    """Tensors no rule consumed: the model can't express them, so refuse rather than guess."""
    if state:
        keys = sorted(state)
        raise CheckpointError(
            f"{source.name} looks like {looks_like}, but it has parts vitviz's ViT can't "
            f"express: {few(keys)}. Accepted: plain ViTs (torchvision, timm, Hugging Face, "
            f"DINO/DINOv2, DeiT, tutorial models)."
        )


def finish(
    source: Source,
    *,
    family: str,
    looks_like: str,
    inferred: dict[str, Any],
    required: Mapping[str, Any],
    state: dict[str, Tensor],
    class_names: Sequence[str] | None,
    preprocessing: dict[str, Any],
    notes: list[str],
    imagenet_if_1000: bool = False,
) -> Conversion:
    """Merge what the weights said with the user's settings, check and build the Conversion.

    ``required``: fields the weights can't say, with an example value each; those the user
    didn't give make one CheckpointError naming them all. User settings win over inferred
    ones (noted when they differ).
    """
    user = dict(source.user)
    unknown = sorted(set(user) - CONFIG_FIELDS - USER_EXTRAS - set(required))
    if unknown:
        raise CheckpointError(
            f"{source.name}: unknown settings {', '.join(unknown)} in the "
            f"model settings; accepted: ViT config fields, class_names, "
            f"preprocessing."
        )
    ask(source, looks_like, required, inferred)
    fields = dict(inferred)
    for key in sorted(set(user) & CONFIG_FIELDS):
        value = user[key]
        if key in fields and _norm(fields[key], key) != _norm(value, key):
            notes.append(
                f"{key} {value!r} from the settings given (the checkpoint suggests {fields[key]!r})"
            )
        fields[key] = value
    try:
        config = ViTConfig(**fields)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{source.name}: the model settings are invalid: {exc}") from exc
    given = user.get("class_names")
    if given is not None and (not isinstance(given, list) or len(given) != config.num_classes):
        raise CheckpointError(
            f"{source.name}: class_names must be a list of "
            f"{config.num_classes} names (one per class of the head)."
        )
    names = resolve_class_names(
        config.num_classes, user.get("class_names"), class_names, imagenet_if_1000
    )
    prep = model_sized(config.image_size, preprocessing, notes)
    user_prep = user.get("preprocessing")
    if user_prep is not None:
        if not isinstance(user_prep, dict):
            raise CheckpointError(f"{source.name}: preprocessing must be a JSON object.")
        prep.update(user_prep)
    prep["channels"] = check_channels(source, prep.get("channels"), config.in_channels)
    try:
        prepared = Preprocessing.from_dict(prep)
    except ValueError as exc:
        raise CheckpointError(
            f"{source.name}: the preprocessing is invalid: {exc} (set preprocessing in "
            f"{source.sidecar_name})"
        ) from exc
    return Conversion(
        family=family,
        config=config,
        state=state,
        class_names=names,
        preprocessing=prepared,
        notes=notes,
    )


def check_channels(source: Source, given: Any, in_channels: int) -> int:
    """The preprocessing's channel count: the model's ``in_channels``; a different one given in
    the settings is refused before any image reaches the model."""
    if given is not None and given != in_channels:
        raise CheckpointError(
            f"{source.name}: the preprocessing gives {given!r} channels but the model takes "
            f"{in_channels}-channel images; leave channels out of the preprocessing or set it "
            f"to {in_channels}."
        )
    return in_channels


def user_value(source: Source, key: str, default: Any = None) -> Any:
    return source.user.get(key, default)


def _norm(value: Any, key: str = "") -> Any:
    if key == "image_size" and _positive_int(value) is not None:
        return [value, value]  # 28 and (28, 28) are the same size
    return list(value) if isinstance(value, tuple) else value


def assumed_imagenet_preprocessing(
    source: Source, notes: list[str], channels: int = 3
) -> dict[str, Any]:
    """Preprocessing for weights that don't say theirs (tutorial models): centre crop,
    bilinear, ImageNet mean/std (0.5 and 0.5 for a model that does not take RGB). A note says
    what was assumed, unless the user's preprocessing gives both mean and std."""
    rgb = channels == 3
    mean, std = (IMAGENET_MEAN, IMAGENET_STD) if rgb else ((0.5,), (0.5,))
    given = source.user.get("preprocessing")
    given = given if isinstance(given, dict) else {}
    missing = [k for k in ("mean", "std") if k not in given]
    if missing:
        what = "ImageNet " + "/".join(missing) if rgb else " and ".join(f"{k} 0.5" for k in missing)
        kind = "" if rgb else f" (a {channels}-channel model)"
        notes.append(
            f"preprocessing assumed: {what}{kind}; set preprocessing in "
            f"{source.sidecar_name} if the model was trained otherwise"
        )
    return {
        "resize": "crop",
        "crop_pct": 1.0,
        "interpolation": "bilinear",
        "mean": mean,
        "std": std,
    }


def _positive_int(value: Any) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
    return int(value) if ok else None


def _size_pair(value: Any) -> tuple[int, int] | None:
    if _positive_int(value) is not None:
        return (value, value)
    if isinstance(value, (list, tuple)) and len(value) == 2:
        h, w = (_positive_int(v) for v in value)
        return (h, w) if h is not None and w is not None else None
    return None


def patch_channels(
    source: Source, n: int, num_patches: int | None, looks_like: str
) -> tuple[int, int, str | None]:
    """(in_channels C, patch size p, a note or None) of a Linear patch embedding taking ``n``
    values per patch (n = C·p·p). Read from, in order: the settings' in_channels, their
    patch_size, their image_size with the position table's ``num_patches``; else C = 3, else
    C = 1. Raises CheckpointError saying what to set when none fits."""
    user = source.user
    where = source.sidecar_name
    for key in ("in_channels", "patch_size"):
        if key in user and _positive_int(user[key]) is None:
            raise CheckpointError(f"{source.name}: {key} must be a positive whole number.")
    C, p = user.get("in_channels"), user.get("patch_size")
    if C is not None:
        side = math.isqrt(n // C)
        if C * side * side != n or (p is not None and p != side):
            need = f"patch size {p}" if p is not None else "any patch size"
            raise CheckpointError(
                f"{source.name}: the patch embedding takes {n} values per patch, not "
                f"in_channels × patch² for in_channels {C} and {need}; check in_channels "
                f"and patch_size in {where}."
            )
        return C, side, None
    if p is not None:
        if n % (p * p):
            raise CheckpointError(
                f"{source.name}: the patch embedding takes {n} values per patch, not a "
                f"multiple of patch_size² = {p * p}; check patch_size in {where}."
            )
        C = n // (p * p)
        return C, p, None if C == 3 else f"in_channels {C} from the patch size {p}"
    size = _size_pair(user.get("image_size"))
    if size is not None and num_patches:
        area = size[0] * size[1]
        side = math.isqrt(area // num_patches) if area % num_patches == 0 else 0
        fits = side > 0 and side * side * num_patches == area and n % (side * side) == 0
        if fits and not (size[0] % side or size[1] % side):
            C = n // (side * side)
            note = f"in_channels {C}, patch size {side} from the image size and position table"
            return C, side, None if C == 3 else note
    for C in (3, 1):
        side = math.isqrt(n // C)
        if C * side * side == n:
            note = (
                f"in_channels 1 inferred ({n} values per patch = 1 × {side}²); set "
                f"in_channels and patch_size in {where} if the model takes otherwise"
            )
            return C, side, None if C == 3 else note
    sizes = [q for q in range(2, math.isqrt(n) + 1) if n % (q * q) == 0] or [1]
    raise CheckpointError(
        f"{source.name} looks like {looks_like}; its patch embedding takes {n} values per "
        f"patch (in_channels × patch²), neither 3 × p² nor 1 × p². Put the patch size in "
        f'{where}, e.g. {{"patch_size": {sizes[-1]}}} (in_channels is then {n} / patch²).'
    )


def finish_kind(
    source: Source,
    *,
    kind: str,
    config_cls: type,
    words: tuple[str, str, str],
    extras: frozenset[str],
    family: str,
    inferred: dict[str, Any],
    state: dict[str, Tensor],
    class_names: Sequence[str] | None,
    preprocessing: dict[str, Any],
    notes: list[str],
    imagenet_if_1000: bool = False,
) -> Conversion:
    """Another kind's conversion (Swin, pyramid): the user's settings over what the weights said
    -> ``config_cls`` (a dataclass with ``validate``), class names, preprocessing. ``words``: how
    the messages name the model, its fields and its settings, e.g. ("a Swin", "Swin config
    fields", "Swin"); ``extras``: the settings keys that are not config fields."""
    user = dict(source.user)
    known = frozenset(f.name for f in dataclasses.fields(config_cls))
    a_model, fields_word, settings_word = words
    unknown = sorted(set(user) - known - extras)
    if unknown:
        raise CheckpointError(
            f"{source.name}: unknown settings {', '.join(unknown)} for {a_model}; accepted: "
            f"{fields_word} ({', '.join(sorted(known))}), class_names, preprocessing."
        )
    fields = dict(inferred)
    for key in sorted(set(user) & known):
        fields[key] = user[key]
    try:
        config = config_cls(**fields)
        config.validate()
    except (TypeError, ValueError) as exc:
        raise CheckpointError(
            f"{source.name}: the {settings_word} settings are invalid: {exc}"
        ) from exc
    given = user.get("class_names")
    if given is not None and (not isinstance(given, list) or len(given) != config.num_classes):
        raise CheckpointError(
            f"{source.name}: class_names must be a list of {config.num_classes} names."
        )
    names = resolve_class_names(config.num_classes, given, class_names, imagenet_if_1000)
    prepared = prepared_preprocessing(source, config, preprocessing, user, notes)
    return Conversion(
        family=family,
        config=config,
        state=state,
        class_names=names,
        preprocessing=prepared,
        notes=notes,
        kind=kind,
    )


def model_sized(
    model_size: Sequence[int], preprocessing: Mapping[str, Any], notes: list[str] | None
) -> dict[str, Any]:
    """``preprocessing`` at the model's own ``model_size`` (H, W): a size a library's settings
    gave (marked with SIZE_SAID_BY, e.g. timm's pretrained_cfg input_size) that is not the
    model's is dropped with a note, so the size analysed is the one the library check built and
    ran (DESIGN §4); a size a family set itself is kept."""
    prep = dict(preprocessing)
    said_by = prep.pop(SIZE_SAID_BY, None)
    size = prep.get("image_size")
    mh, mw = (int(v) for v in model_size)
    if said_by is not None and size is not None and [int(v) for v in size] != [mh, mw]:
        del prep["image_size"]
        if notes is not None:
            notes.append(
                f"{said_by} {int(size[0])}×{int(size[1])} is not the size the model is built "
                f"for: analysed at its own {mh}×{mw} (its settings and position table), the "
                "size checked"
            )
    return {"image_size": [mh, mw], **prep}


def prepared_preprocessing(
    source: Source,
    config: Any,
    preprocessing: Mapping[str, Any],
    user: Mapping[str, Any],
    notes: list[str] | None = None,
) -> Preprocessing:
    """The model's preprocessing: ``preprocessing`` (the library's, at ``config``'s image size:
    model_sized) with the user's ``preprocessing`` object laid over it and the channels checked
    against the model's; CheckpointError in one line for one ``Preprocessing`` can't take."""
    prep = model_sized(config.image_size, preprocessing, notes)
    if isinstance(user.get("preprocessing"), dict):
        prep.update(user["preprocessing"])
    prep["channels"] = check_channels(source, prep.get("channels"), config.in_channels)
    try:
        return Preprocessing.from_dict(prep)
    except ValueError as exc:
        raise CheckpointError(f"{source.name}: the preprocessing is invalid: {exc}") from exc


def timm_mlp_ratio(dim: int, hidden: int) -> float:
    """timm's MLP ratio r that gives a ``dim``-wide block an MLP ``hidden`` wide: timm builds
    int(dim · r), and hidden / dim can come out one short in floats (22 · (30 / 22) = 29.99…),
    so then the middle of hidden and hidden + 1 (a ``dim`` of 0: no layer, hidden itself)."""
    if dim <= 0:
        return float(hidden)
    r = hidden / dim
    return r if int(dim * r) == hidden else (hidden + 0.5) / dim


class _Softmaxes(TorchFunctionMode):
    """Every softmax's output while active."""

    def __init__(self) -> None:
        super().__init__()
        self.out: list[Tensor] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        result = func(*args, **(kwargs or {}))
        if func in (torch.Tensor.softmax, torch.softmax, torch.nn.functional.softmax):
            self.out.append(result)
        return result


def read_softmaxes(model: nn.Module, x: Tensor, count: int) -> tuple[Tensor, list[Tensor] | None]:
    """A library model's logits on ``x`` and every softmax's output in order (in a model whose
    only softmaxes are its attention's, each attention's probabilities, e.g. (B, heads, N, N)),
    None when there are not ``count`` of them."""
    with torch.no_grad(), _Softmaxes() as mode:
        logits = model(x)
    return logits, (mode.out if len(mode.out) == count else None)


def aligned(t: Tensor) -> Tensor:
    """``t`` in 64-byte aligned storage (a copy when it is an unaligned view into a file's
    buffer): a conv's or a product's kernel choice, and so its fp32 rounding, follows the
    alignment, as in the library's own model after a normal load."""
    return t if t.data_ptr() % 64 == 0 else t.clone()


def aligned_state(state: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Every tensor of ``state`` in aligned storage (``aligned``)."""
    return {k: aligned(t) for k, t in state.items()}
