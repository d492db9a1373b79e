"""A Swin written in a user's own file (the guides' ``WindowAttention``), captured as a Swin.

A window-attention module is the innermost module with ``window_size`` and ``num_heads``
attributes. While ``SwinCodeModel.forward_explained`` runs, the last softmax over the last axis
inside each call of such a module, (B·windows, heads, n, n), is recorded as its
(B, windows, heads, n, n) view (the tensor the module goes on with, so ∂y/∂A can be taken).

Each block's window layout comes from, in order: the user's ``windows`` ((window, shift) per
block); the attributes (``window_size`` of the attention, ``shift_size`` and
``input_resolution`` of the nearest enclosing module that has them); the grid from the block's
input ((B, H, W, C) as it is, (B, L, C) matched against image size / patch size / 2^s).
Captured layouts follow the seed code: pad nothing, roll before partitioning.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from vitviz.kinds.swin.network import SwinOutput
from vitviz.kinds.swin.windows import WindowLayout
from vitviz.modelcode.batching import FixedBatch
from vitviz.modelcode.errors import ModelCodeError
from vitviz.modelcode.outputs import OutputReading, find_output, head_width

_SOFTMAXES = frozenset({torch.softmax, torch.Tensor.softmax, F.softmax, torch.special.softmax})


def _pair(value: Any) -> tuple[int, int] | None:
    """5 or (5, 5) or [5, 7] -> (h, w) of positive ints; None for anything else."""
    items = [value, value] if isinstance(value, int) else value
    ok = isinstance(items, (tuple, list)) and len(items) == 2
    if ok and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in items):
        return (int(items[0]), int(items[1]))
    return None


def _is_window_attention(m: nn.Module) -> bool:
    heads = getattr(m, "num_heads", None)
    return _pair(getattr(m, "window_size", None)) is not None and isinstance(heads, int)


def window_attention_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """(name, module) of every window-attention module, in registration order: the innermost
    modules with ``window_size`` and ``num_heads`` (a block holding one is not counted)."""
    found = [(n, m) for n, m in model.named_modules() if _is_window_attention(m)]
    names = [n for n, _ in found]
    return [
        (n, m)
        for n, m in found
        if not any(o != n and o.startswith(f"{n}.") for o in names) and n != ""
    ]


def _enclosing(model: nn.Module, name: str, attribute: str) -> Any:
    """The value of ``attribute`` on the module ``name`` or its nearest ancestor that has it."""
    parts = name.split(".")
    for k in range(len(parts), -1, -1):
        module = model.get_submodule(".".join(parts[:k]))
        if hasattr(module, attribute):
            return getattr(module, attribute)
    return None


def _block_name(model: nn.Module, name: str) -> str:
    """The nearest enclosing module with ``shift_size`` (the block), else the parent."""
    parts = name.split(".")
    for k in range(len(parts), -1, -1):
        prefix = ".".join(parts[:k])
        if hasattr(model.get_submodule(prefix), "shift_size"):
            return prefix
    return ".".join(parts[:-1])


@dataclass
class SwinCodeConfig:
    """What vitviz knows of a model-code Swin."""

    image_size: tuple[int, int]  # (H, W) the model takes
    patch_size: int
    num_classes: int
    heads: tuple[int, ...]  # per block
    in_channels: int = 3
    source: str = ""  # "FILE.py:NAME"
    windows: tuple[tuple[int, int], ...] | None = None  # user's (window, shift) per block
    block_stages: tuple[int, ...] = ()  # per block, from the probing forward pass
    block_windows: tuple[int, ...] = ()  # per block: the window's side (wh)
    block_dims: tuple[int, ...] = ()  # per block: the attention's ``dim`` (0 when unknown)
    # what the forward returns (found on the probing pass, as for a ViT from code): where the
    # (B, C) tensor is and whether it holds logits, probabilities or log-probabilities
    reading: OutputReading | None = None

    @property
    def outputs(self) -> str:
        return self.reading.kind if self.reading is not None else "logits"

    @property
    def depth(self) -> int:
        return len(self.heads)

    def _per_stage(self, values: tuple[int, ...]) -> list[int]:
        """The value of each stage's first block."""
        firsts = {}
        for stage, value in zip(self.block_stages, values, strict=True):
            firsts.setdefault(stage, value)
        return [firsts[s] for s in sorted(firsts)]

    def to_dict(self) -> dict[str, Any]:
        """Like SwinConfig.to_dict: per-stage dims, depths, heads and windows (``vitviz-cli
        info``), with the model-code fields."""
        stages = sorted(set(self.block_stages))
        return {
            "image_size": list(self.image_size),
            "patch_size": self.patch_size,
            "num_classes": self.num_classes,
            "in_channels": self.in_channels,
            "dims": self._per_stage(self.block_dims),
            "depths": [self.block_stages.count(s) for s in stages],
            "heads": self._per_stage(self.heads),
            "window_sizes": self._per_stage(self.block_windows),
            "version": 1,
            "source": self.source,
            "windows": None if self.windows is None else [list(w) for w in self.windows],
            "outputs": self.outputs,
        }


@dataclass
class _Capture:
    batch: int  # rows the model runs (a FixedBatch model's padded batch)
    keep: int | None = None  # rows to record of a padded batch (None: all)
    current: list[int] = field(default_factory=list)  # stack of active module indices
    attentions: dict[int, Tensor] = field(default_factory=dict)
    inputs: dict[int, tuple[int, ...]] = field(default_factory=dict)  # block input shapes


class _WindowSoftmax(TorchFunctionMode):
    """Records the softmax a window-attention module computes (the last one of each call)."""

    def __init__(self, cap: _Capture) -> None:
        super().__init__()
        self.cap = cap

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func not in _SOFTMAXES or not self.cap.current or not isinstance(out, Tensor):
            return out
        dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
        B = self.cap.batch
        square = out.ndim == 4 and out.shape[-1] == out.shape[-2]
        if dim in (-1, 3) and square and out.shape[0] % B == 0:
            a = out.unflatten(0, (B, out.shape[0] // B))  # (B, windows, heads, n, n)
            keep = self.cap.keep
            if keep is None or keep >= B:
                self.cap.attentions[self.cap.current[-1]] = a
                return a.flatten(0, 1)
            kept = a[:keep]  # a padded batch: the caller's rows, on the path to the output
            self.cap.attentions[self.cap.current[-1]] = kept
            return torch.cat([kept, a[keep:]]).flatten(0, 1)
        return out


@contextmanager
def _capturing(model: nn.Module, batch: int) -> Iterator[_Capture]:
    """Within the block, each window-attention call's softmax and each block's input shape
    land in the capture; the hooks are removed on the way out, even when the block raises.
    A FixedBatch ``model`` runs its padded batch: only the first ``batch`` rows are kept."""
    fixed = isinstance(model, FixedBatch) and batch <= model.batch
    cap = _Capture(model.batch, batch) if fixed else _Capture(batch)  # type: ignore[arg-type]

    def enter(_m: nn.Module, args: Any, *, i: int, own: bool) -> None:
        cap.current.append(i)
        if own:  # the module is its own block: its input is the block's
            note_input(_m, args, i=i)

    def leave(_m: nn.Module, _args: Any, _out: Any) -> None:
        cap.current.pop()

    def note_input(_m: nn.Module, args: Any, *, i: int) -> None:
        if args and isinstance(args[0], Tensor):
            cap.inputs[i] = tuple(args[0].shape)

    handles = []
    for i, (name, module) in enumerate(window_attention_modules(model)):
        block = model.get_submodule(_block_name(model, name))
        own = block is module
        handles.append(module.register_forward_pre_hook(partial(enter, i=i, own=own)))
        handles.append(module.register_forward_hook(leave))
        if not own:
            handles.append(block.register_forward_pre_hook(partial(note_input, i=i)))
    try:
        with _WindowSoftmax(cap):
            yield cap
    finally:
        for h in handles:
            h.remove()


def _grid(
    model: nn.Module, name: str, shape: tuple[int, ...] | None, x: Tensor, patch: int
) -> tuple[int, int]:
    """A block's (H_s, W_s): its ``input_resolution``, its (B, H, W, C) input, or the stage of
    its (B, L, C) input on the (H/p, W/p) grid halved s times."""
    stated = _pair(_enclosing(model, name, "input_resolution"))
    if stated is not None:
        return stated
    if shape is not None and len(shape) == 4:
        return (shape[1], shape[2])
    if shape is not None and len(shape) == 3:
        h, w = x.shape[-2] // patch, x.shape[-1] // patch
        for _ in range(16):
            if h * w == shape[1]:
                return (h, w)
            h, w = (h + 1) // 2, (w + 1) // 2
    raise ModelCodeError(
        f"can't tell the feature grid of {name}: no input_resolution attribute and its block "
        "input does not match the image size / patch size; give the window layout"
    )


def _layout(grid: tuple[int, int], window: tuple[int, int], shift: int) -> WindowLayout:
    H, W = grid
    padded = (math.ceil(H / window[0]) * window[0], math.ceil(W / window[1]) * window[1])
    shifts = tuple(0 if size <= w else shift for size, w in zip(grid, window, strict=True))
    return WindowLayout(grid, window, shifts, padded)  # type: ignore[arg-type]


class SwinCodeModel(nn.Module):
    """The user's Swin (``inner``, unchanged) with ``forward_explained`` giving SwinOutput."""

    model_kind = "swin"

    def __init__(self, inner: nn.Module, config: SwinCodeConfig) -> None:
        super().__init__()
        self.inner = inner
        self.config = config
        self.attention_names = [n for n, _ in window_attention_modules(inner)]
        if not self.attention_names:
            raise ModelCodeError("no window-attention module (window_size and num_heads) found")
        if config.windows is not None and len(config.windows) != len(self.attention_names):
            raise ModelCodeError(
                f"{len(config.windows)} window layouts were given for "
                f"{len(self.attention_names)} window-attention modules"
            )

    def forward(self, x: Tensor) -> Tensor:
        """(B, C, H, W) -> (B, classes) logits (log-probabilities for a model that returns
        probabilities); the user's forward, nothing captured."""
        return self._scores(self.inner(x), x.shape[0])

    def _scores(self, output: Any, batch: int) -> Tensor:
        """The class scores of ``output`` as the probing pass found them (found on that pass)."""
        if self.config.reading is None:
            self.config.reading = find_output(output, batch, head_width(self.inner))
        return self.config.reading.read(output)

    def _window(self, b: int) -> tuple[tuple[int, int], int]:
        """Block b's (wh, ww) window and shift."""
        if self.config.windows is not None:
            w, s = self.config.windows[b]
            return (w, w), s
        name = self.attention_names[b]
        window = _pair(getattr(self.inner.get_submodule(name), "window_size", None))
        shift = _enclosing(self.inner, name, "shift_size")
        shift = _pair(shift)[0] if _pair(shift) is not None else 0
        return window, shift  # type: ignore[return-value]

    def forward_explained(
        self, x: Tensor, capture_attention: bool = True, hidden_states: bool = False
    ) -> SwinOutput:
        """Logits (B, C) and, per block, (B, windows, heads, n, n) attention with its layout."""
        if not capture_attention:
            return SwinOutput(self.forward(x), [], [], [])
        with _capturing(self.inner, x.shape[0]) as cap:
            logits = self._scores(self.inner(x), x.shape[0])
        out = SwinOutput(logits, [], [], [])
        for b, name in enumerate(self.attention_names):
            if b not in cap.attentions:
                raise ModelCodeError(f"{name} computed no softmax over (windows, heads, n, n)")
            grid = _grid(self.inner, name, cap.inputs.get(b), x, self.config.patch_size)
            window, shift = self._window(b)
            layout = _layout(grid, window, shift)
            a = cap.attentions[b]
            if a.shape[1] != layout.num_windows or a.shape[-1] != layout.window_area:
                raise ModelCodeError(
                    f"{name}: attention {tuple(a.shape[1:])} does not fit {layout.num_windows} "
                    f"windows of {window[0]}×{window[1]} on the {grid[0]}×{grid[1]} grid"
                )
            if not out.stage_grids or out.stage_grids[-1] != grid:
                out.stage_grids.append(grid)
            out.attentions.append(a)
            out.layouts.append(layout)
            out.block_stages.append(len(out.stage_grids) - 1)
        return out


def swin_code_model(
    inner: nn.Module,
    image_size: tuple[int, int],
    patch_size: int,
    windows: Sequence[tuple[int, int]] | None = None,
    source: str = "",
    in_channels: int = 3,
) -> SwinCodeModel:
    """Wrap ``inner`` after one probing forward pass on a (1, C, H, W) input."""
    heads = tuple(int(m.num_heads) for _, m in window_attention_modules(inner))
    x = torch.zeros(1, in_channels, *image_size, device=next(inner.parameters()).device)
    config = SwinCodeConfig(
        image_size=image_size,
        patch_size=patch_size,
        num_classes=0,
        heads=heads,
        in_channels=in_channels,
        source=source,
        windows=None if windows is None else tuple((int(w), int(s)) for w, s in windows),
    )
    model = SwinCodeModel(inner, config).eval()
    with torch.no_grad():
        out = model.forward_explained(x)
    if out.logits.ndim != 2:
        raise ModelCodeError(f"the model returned logits of shape {tuple(out.logits.shape)}")
    config.num_classes = int(out.logits.shape[1])
    config.block_stages = tuple(out.block_stages)
    config.block_windows = tuple(lay.window[0] for lay in out.layouts)
    config.block_dims = tuple(
        int(getattr(m, "dim", 0) or 0) for _, m in window_attention_modules(inner)
    )
    return model
