"""The image size a model takes when neither its arguments nor the settings say it.

First its position table: a table of T tokens over a g×g grid with P prefix tokens
(T = P + g²) means images of g·patch pixels. Else the first size whose forward pass runs:
multiples of the patch, common sizes first, at most ``MAX_GRID`` patches a side, ``MAX_TRIES``
sizes and ``TIME_BUDGET_S`` seconds, each a single no-gradient pass on one random image.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor, nn

from vitviz.modelcode.errors import (
    ModelCodeError,
    describe_exception,
    fixed_batch_error,
    setting_hint,
)

COMMON_SIZES = (28, 32, 64, 96, 128, 224, 256, 384, 512)
MAX_GRID = 32  # patches a side: at most 1,024 patch tokens in a probe
MAX_TRIES = 40
MAX_PREFIX = 16  # CLS, distillation and register tokens a position table may hold
MAX_TABLE_GRID = 64  # a larger table is not tried (4,096 patch tokens)
TIME_BUDGET_S = 20.0

_TABLE_NAME = re.compile(r"pos", re.IGNORECASE)
_NOT_A_TABLE = re.compile(r"rel|bias|index|scale", re.IGNORECASE)
_PREFIX_NAME = re.compile(
    r"(cls|class|dist\w*|reg|registers?)(_?(tokens?|tok|emb|embed|embeddings?))?", re.IGNORECASE
)


@dataclass(frozen=True)
class FoundSize:
    size: tuple[int, int]  # (H, W)
    note: str  # how it was found, for LoadedModel.notes


@dataclass(frozen=True)
class _Candidate:
    size: int  # S: the model takes S×S images
    note: str


@dataclass
class _Trials:
    """Sizes tried in a forward pass, in order, and the first failure (for the message)."""

    tried: list[int] = field(default_factory=list)
    first_error: str = ""
    first_error_size: int = 0
    out_of_time: bool = False


def _last(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _tensors(model: nn.Module) -> Iterator[tuple[str, Tensor]]:
    yield from model.named_parameters()
    yield from model.named_buffers()


def prefix_hint(model: nn.Module, width: int | None) -> int | None:
    """Tokens in parameters named like a CLS / distillation / register token, or None."""
    count = 0
    for name, t in _tensors(model):
        if not _PREFIX_NAME.fullmatch(_last(name)) or t.numel() == 0:
            continue
        count += t.numel() // width if width and t.numel() % width == 0 else 1
    return count or None


def _grids(tokens: int, prefixes: list[int]) -> Iterator[tuple[int, int]]:
    """(prefix, g) with tokens = prefix + g², in the order of ``prefixes``."""
    for prefix in prefixes:
        g = math.isqrt(max(tokens - prefix, 0))
        if 0 <= prefix < tokens and g > 0 and g * g == tokens - prefix:
            yield prefix, g


def table_candidates(
    model: nn.Module, patch: int, width: int | None, prefix: int | None
) -> list[_Candidate]:
    """Sizes the position tables say, most likely first: (T, D), (1, T, D) or a g×g grid."""
    hint = prefix if prefix is not None else prefix_hint(model, width)
    out: list[_Candidate] = []
    for name, t in _tensors(model):
        last = _last(name)
        if not _TABLE_NAME.search(last) or _NOT_A_TABLE.search(last) or not t.is_floating_point():
            continue
        shape = tuple(t.shape)
        where = f"the position table {name}"
        if len(shape) == 4 and shape[0] == 1:
            grid = None
            if shape[1] == shape[2] and (width is None or shape[3] == width):
                grid = shape[1]  # (1, g, g, D)
            elif shape[2] == shape[3] and (width is None or shape[1] == width):
                grid = shape[2]  # (1, D, g, g)
            if grid:
                note = f"{where} (a {grid}×{grid} grid, patch {patch})"
                out.append(_Candidate(grid * patch, note))
            continue
        if len(shape) == 3 and shape[0] == 1:
            shape = shape[1:]
        if len(shape) != 2 or (width is not None and shape[1] != width):
            continue
        tokens = shape[0]
        grids = list(_grids(tokens, [hint])) if hint is not None else []
        if not grids and prefix is None:  # no (fitting) token parameters: any prefix
            grids = list(_grids(tokens, list(range(MAX_PREFIX + 1))))
        for p, g in grids:
            parts = f"{p} + {g}×{g}" if p else f"{g}×{g}"
            note = f"{where} ({tokens} tokens = {parts}, patch {patch})"
            out.append(_Candidate(g * patch, note))
    unique: dict[int, _Candidate] = {}
    for c in out:
        if 0 < c.size // patch <= MAX_TABLE_GRID:
            unique.setdefault(c.size, c)
    return list(unique.values())


def probe_order(patch: int) -> list[int]:
    """Sizes to try: common sizes that are multiples of the patch, then every other multiple.

    One patch (S = patch) is never tried: a (B, 1, D) token tensor broadcasts against a
    position table of any length, so a model could seem to run at a size it can't take.
    """
    fits = [s for s in COMMON_SIZES if s % patch == 0 and 2 <= s // patch <= MAX_GRID]
    rest = [g * patch for g in range(2, MAX_GRID + 1) if g * patch not in fits]
    return (fits + rest)[:MAX_TRIES]


@contextmanager
def _watch_linear(linear: nn.Linear | None) -> Iterator[list[tuple[int, ...]]]:
    """Input shapes of ``linear`` during the block (none watched when it is None)."""
    shapes: list[tuple[int, ...]] = []
    handle = None
    if linear is not None:
        handle = linear.register_forward_pre_hook(
            lambda _m, args: shapes.append(tuple(args[0].shape)) if args else None
        )
    try:
        yield shapes
    finally:
        if handle is not None:
            handle.remove()


def _device(model: nn.Module) -> torch.device:
    try:
        return next(model.parameters()).device
    except StopIteration:
        return torch.device("cpu")


def _run(
    model: nn.Module,
    channels: int,
    size: tuple[int, int],
    linear: nn.Linear | None,
    file: Path | None,
) -> tuple[BaseException | None, list[tuple[int, ...]]]:
    """One no-gradient pass on a random 1×C×H×W image: its exception (or None) and the
    input shapes ``linear`` saw."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, channels, *size, generator=g).to(_device(model))
    try:
        with torch.no_grad(), _watch_linear(linear) as shapes:
            model(x)
    except (Exception, SystemExit) as exc:  # a size the model refuses, told back
        refusal = fixed_batch_error(exc, file)
        if refusal is not None:  # no image size would run: say why at once
            raise refusal from exc
        return exc, shapes
    return None, shapes


def _linear_problem(shapes: list[tuple[int, ...]], patches: int) -> str | None:
    """None when the patch Linear was called on ``patches`` tokens, else what it saw."""
    if any(len(s) >= 3 and math.prod(s[1:-1]) == patches for s in shapes):
        return None
    seen = ", ".join("×".join(map(str, s)) for s in shapes) or "no call"
    return f"that layer did not take the {patches} patches of the image (its inputs: {seen})"


def try_size(
    model: nn.Module,
    channels: int,
    size: int,
    file: Path | None,
    patch_linear: nn.Linear | None = None,
    patch: int = 0,
) -> str | None:
    """None when one forward pass on a 1×C×S×S image runs, else what went wrong.

    With ``patch_linear`` (a patch size read from a Linear layer), the pass only counts when
    that layer took the (S/patch)² patches of the image.
    """
    exc, shapes = _run(model, channels, (size, size), patch_linear, file)
    if exc is not None:
        return describe_exception(exc, file)
    if patch_linear is not None:
        return _linear_problem(shapes, (size // patch) ** 2)
    return None


def check_patch_linear(
    model: nn.Module,
    linear: nn.Linear,
    size: tuple[int, int],
    patch: int,
    channels: int,
    file: Path | None = None,
) -> str | None:
    """Whether ``linear`` takes the patches of an H×W image: None, or what it took instead.

    A forward pass that fails is left to the caller's own probe (None here).
    """
    exc, shapes = _run(model, channels, size, linear, file)
    if exc is not None:
        return None
    return _linear_problem(shapes, (size[0] // patch) * (size[1] // patch))


def _sizes_text(sizes: list[int], patch: int) -> str:
    ordered = sorted(sizes)
    every = list(range(ordered[0], ordered[-1] + 1, patch))
    if len(ordered) > 4 and ordered == every:
        return f"{ordered[0]}, {ordered[1]}, …, {ordered[-1]} (every multiple of {patch})"
    return ", ".join(map(str, ordered))


def _trial_loop(
    model: nn.Module,
    sizes: list[int],
    trials: _Trials,
    channels: int,
    file: Path | None,
    patch_linear: nn.Linear | None,
    patch: int,
    deadline: float,
) -> int | None:
    """The first of ``sizes`` whose forward pass runs, noting each try in ``trials``."""
    for size in sizes:
        if size in trials.tried:
            continue
        if time.monotonic() >= deadline or len(trials.tried) >= MAX_TRIES:
            trials.out_of_time = True
            return None
        trials.tried.append(size)
        error = try_size(model, channels, size, file, patch_linear, patch)
        if error is None:
            return size
        if not trials.first_error:
            trials.first_error, trials.first_error_size = error, size
    return None


def find_image_size(
    model: nn.Module,
    patch: int,
    channels: int,
    width: int | None = None,
    prefix: int | None = None,
    file: Path | None = None,
    patch_linear: nn.Linear | None = None,
) -> FoundSize:
    """The square image size of ``model`` from its position table, else by probing.

    ``width`` is the token width D when known (it picks the position table); ``prefix`` the
    prefix token count when the user gave it. Raises ModelCodeError naming the sizes tried.
    """
    deadline = time.monotonic() + TIME_BUDGET_S
    trials = _Trials()
    tables = table_candidates(model, patch, width, prefix)
    for candidate in tables:
        size = _trial_loop(
            model, [candidate.size], trials, channels, file, patch_linear, patch, deadline
        )
        if size is not None:
            return FoundSize((size, size), f"image size {size} from {candidate.note}")
    order = probe_order(patch)
    size = _trial_loop(model, order, trials, channels, file, patch_linear, patch, deadline)
    if size is not None:
        note = f"image size {size}: the first size whose forward pass ran"
        if len(trials.tried) > 1:
            note += f" (tried {', '.join(map(str, trials.tried))})"
        later = [s for s in order if s not in trials.tried][:1]
        if later and try_size(model, channels, later[0], file, patch_linear, patch) is None:
            note += (
                f"; it runs at {later[0]} too: if it was trained at another size, "
                + setting_hint({"image_size": "N"})
            )
        return FoundSize((size, size), note)
    raise ModelCodeError(_failure(trials, tables, channels, patch))


def _failure(trials: _Trials, tables: list[_Candidate], channels: int, patch: int) -> str:
    parts = ["could not find the image size the model takes: no image_size (or img_size) argument"]
    if tables:
        sizes = ", ".join(str(c.size) for c in tables)
        parts.append(f"its position table says {sizes} but the forward pass failed there")
    else:
        parts.append("no position table")
    tried = _sizes_text(trials.tried, patch) if trials.tried else "none"
    stop = " (stopped: time or try limit)" if trials.out_of_time else ""
    parts.append(f"no forward pass ran on a 1×{channels}×S×S image for S = {tried}{stop}")
    text = "; ".join(parts)
    if trials.first_error:
        text += f"; at {trials.first_error_size}: {trials.first_error}"
    return f"{text}; {setting_hint({'image_size': 'N'})}, N the size it was trained at"
