"""ModelCodeError, and how an exception raised inside a user's file is told back to them."""

from __future__ import annotations

import linecache
import math
import os
import re
import traceback
from pathlib import Path

from vitviz.core.errors import VitvizError

_MESSAGE_LIMIT = 240


class ModelCodeError(VitvizError):
    """A model file that can't be used as given; the message says what was wrong and where."""


_FIELDS = {
    "image_size": "Image size",
    "patch_size": "Patch size",
    "num_prefix_tokens": "Prefix tokens",
}


def setting_hint(values: dict[str, str]) -> str:
    """'give it in the settings: --config FILE.json holding {"image_size": N} (in the window:
    Image size)' for the settings ``values`` (key -> example text)."""
    shown = ", ".join(f'"{k}": {v}' for k, v in values.items())
    fields = " and ".join(_FIELDS.get(k, k) for k in values)
    return (
        f"give {'it' if len(values) == 1 else 'them'} in the settings: --config FILE.json "
        f"holding {{{shown}}} (in the window: {fields})"
    )


def _same_file(a: str, b: Path) -> bool:
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except (OSError, ValueError):
        return False


def _where(exc: BaseException, file: Path | None) -> str:
    """'model.py, line 12: x = y' for the last line of ``file`` in the traceback, or ''."""
    if file is None:
        return ""
    if isinstance(exc, SyntaxError) and exc.filename and _same_file(exc.filename, file):
        code = (exc.text or "").strip()
        return f"{file.name}, line {exc.lineno}" + (f": {code}" if code else "")
    found: tuple[str, int] | None = None
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        if _same_file(frame.f_code.co_filename, file):
            found = (frame.f_code.co_filename, lineno)
    if found is None:
        return ""
    code = linecache.getline(found[0], found[1]).strip()
    return f"{file.name}, line {found[1]}" + (f": {code}" if code else "")


def describe_exception(exc: BaseException, file: Path | None = None) -> str:
    """'TypeError: message (model.py, line 12: code)': type, shortened message, line in ``file``."""
    text = exc.msg if isinstance(exc, SyntaxError) and exc.msg else str(exc)
    text = " ".join(text.split())
    if len(text) > _MESSAGE_LIMIT:
        text = text[: _MESSAGE_LIMIT - 1] + "…"
    head = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    where = _where(exc, file)
    return f"{head} ({where})" if where else head


_VIEW_ERROR = re.compile(r"shape '\[(-?\d+(?:, -?\d+)*)\]' is invalid for input of size (\d+)")


def fixed_batch(exc: BaseException, batch: int = 1) -> int | None:
    """The batch size a forward pass fixed in a ``view`` / ``reshape`` (``x.view(64, 49, 16)``)
    when that is why it failed on ``batch`` images, else None.

    torch says "shape '[64, 49, 16]' is invalid for input of size 784": the first size B is
    the batch when the rest of the shape holds the input of ``batch`` images, not of B.
    """
    m = _VIEW_ERROR.search(str(exc)) if isinstance(exc, RuntimeError) else None
    if m is None:
        return None
    first, *rest = (int(v) for v in m.group(1).split(", "))
    size = int(m.group(2))
    known = math.prod(v for v in rest if v != -1)
    if first <= batch or not rest or known <= 0 or size % known:
        return None
    if -1 in rest:  # the rest of the shape is unknown: batch × known divides the input
        return first
    return first if size == batch * known else None


class FixedBatchError(ModelCodeError):
    """A forward pass that fixes its batch size: ``batch`` and where (file, line, code)."""

    def __init__(self, message: str, batch: int, where: str) -> None:
        super().__init__(message)
        self.batch = batch
        self.where = where


def fixed_batch_error(
    exc: BaseException, file: Path | None, batch: int = 1
) -> FixedBatchError | None:
    """The one-line refusal of a forward pass that fixes its batch size, or None."""
    fixed = fixed_batch(exc, batch)
    if fixed is None:
        return None
    where = _where(exc, file)
    return FixedBatchError(
        f"the model's forward pass fixes the batch size at {fixed}"
        + (f" ({where})" if where else "")
        + f", so it can't run on {batch} image(s); vitviz runs one image or a few at a time: "
        f"write x.shape[0] (or -1) there instead of {fixed}",
        fixed,
        where,
    )


def probe_run_error(
    exc: BaseException, file: Path, name: str, in_channels: int, size: tuple[int, int]
) -> ModelCodeError:
    """What to raise when ``name`` from ``file`` failed on a 1 × ``in_channels`` × H × W input
    (``size`` = (H, W)): the fixed-batch refusal where that is why, else the failure told back."""
    refusal = fixed_batch_error(exc, file)
    if refusal is not None:
        return refusal
    h, w = size
    return ModelCodeError(
        f"running {name} on a 1×{in_channels}×{h}×{w} input failed: {describe_exception(exc, file)}"
    )
