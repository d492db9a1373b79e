"""Window geometry of one Swin block: clamp, shift, padding, partition, shift mask, position bias.

Pure functions of shapes, shared by the model (to compute) and by the explanations (to map the
captured attention back to image coordinates).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

MASK_VALUE = -100.0  # what every library adds between tokens of different shifted regions


@dataclass(frozen=True)
class WindowLayout:
    """How one block partitions its (H, W) feature map into windows.

    The map is padded at the bottom/right to ``padded`` and cyclically shifted by ``shift``
    (rolled by −shift); ``shift_first``: rolled before padding (timm), else after (torchvision,
    Hugging Face). Windows are numbered row-major over the padded map, tokens row-major inside
    a window.
    """

    grid: tuple[int, int]  # (H, W) real tokens
    window: tuple[int, int]  # (wh, ww)
    shift: tuple[int, int]  # (sh, sw), 0 along an axis that is not shifted
    padded: tuple[int, int]  # (Hp, Wp), multiples of the window
    shift_first: bool = False

    @property
    def windows_grid(self) -> tuple[int, int]:
        return (self.padded[0] // self.window[0], self.padded[1] // self.window[1])

    @property
    def num_windows(self) -> int:
        gh, gw = self.windows_grid
        return gh * gw

    @property
    def window_area(self) -> int:
        return self.window[0] * self.window[1]

    @property
    def shifted(self) -> bool:
        return any(self.shift)

    def token_slots(self) -> tuple[Tensor, Tensor]:
        """Where each real token sits: (window index, slot in the window), each (H·W,) long,
        tokens row-major over the grid. Token (y, x) is at ((y − sh) mod Hp, (x − sw) mod Wp)
        of the padded shifted map (mod H, W when rolled before padding). Cached: read only."""
        win, slot, _ = _slots(self)
        return win, slot

    def slot_tokens(self) -> Tensor:
        """The real token in each window slot, (windows, n) long; −1 for a padding slot.
        Cached: read only."""
        return _slots(self)[2]


def slots_on(layout: WindowLayout, device: torch.device | str) -> tuple[Tensor, Tensor, Tensor]:
    """(window of each token, slot of each token, token of each slot) on ``device``; cached,
    read only (see ``WindowLayout.token_slots`` and ``slot_tokens``)."""
    key = str(torch.device(device))
    return _slots(layout) if key == "cpu" else _slots_on(layout, key)


@functools.lru_cache(maxsize=256)
def _slots_on(layout: WindowLayout, device: str) -> tuple[Tensor, Tensor, Tensor]:
    with torch.inference_mode(False):  # kept: a later backward pass saves them
        return tuple(t.to(device) for t in _slots(layout))  # type: ignore[return-value]


@functools.lru_cache(maxsize=256)
def _slots(layout: WindowLayout) -> tuple[Tensor, Tensor, Tensor]:
    with torch.inference_mode(False):  # kept: a later backward pass saves them
        return _make_slots(layout)


def _make_slots(layout: WindowLayout) -> tuple[Tensor, Tensor, Tensor]:
    H, W = layout.grid
    Hp, Wp = layout.padded
    wh, ww = layout.window
    ry, rx = (H, W) if layout.shift_first else (Hp, Wp)
    y = torch.arange(H).repeat_interleave(W)
    x = torch.arange(W).repeat(H)
    py, px = (y - layout.shift[0]) % ry, (x - layout.shift[1]) % rx
    win = (py // wh) * (Wp // ww) + px // ww
    slot = (py % wh) * ww + px % ww
    tokens = torch.full((layout.num_windows, layout.window_area), -1, dtype=torch.long)
    tokens[win, slot] = torch.arange(win.numel())
    return win, slot, tokens


def block_layout(
    grid: tuple[int, int],
    window: int,
    shift: int,
    clamp: str = "none",
    shift_first: bool = False,
) -> WindowLayout:
    """The layout of a block with a ``window``-token window and target ``shift`` on ``grid``
    (see SwinConfig for the ``clamp`` rules of each library)."""
    H, W = grid
    win = [window, window]
    sh = [shift, shift]
    if clamp == "min" and min(H, W) <= window:
        win, sh = [min(H, W)] * 2, [0, 0]
    elif clamp == "axis":
        win = [min(H, window), min(W, window)]
    padded = (math.ceil(H / win[0]) * win[0], math.ceil(W / win[1]) * win[1])
    for axis, size in enumerate((H, W)):
        if size <= win[axis]:  # the window covers the axis: nothing to shift
            sh[axis] = 0
    return WindowLayout((H, W), (win[0], win[1]), (sh[0], sh[1]), padded, shift_first)


def partition(x: Tensor, layout: WindowLayout) -> Tensor:
    """(B, H, W, C) map -> (B, windows, n, C): padded and shifted in the layout's order."""
    B, H, W, C = x.shape
    Hp, Wp = layout.padded
    shifts = (-layout.shift[0], -layout.shift[1])
    if layout.shift_first:
        x = torch.roll(x, shifts, dims=(1, 2)) if layout.shifted else x
        x = F.pad(x, (0, 0, 0, Wp - W, 0, Hp - H))
    else:
        x = F.pad(x, (0, 0, 0, Wp - W, 0, Hp - H))
        x = torch.roll(x, shifts, dims=(1, 2)) if layout.shifted else x
    (gh, gw), (wh, ww) = layout.windows_grid, layout.window
    x = x.reshape(B, gh, wh, gw, ww, C).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(B, gh * gw, wh * ww, C)


def unpartition(windows: Tensor, layout: WindowLayout) -> Tensor:
    """(B, windows, n, C) -> (B, H, W, C): the inverse of ``partition`` on the real tokens."""
    B, _, _, C = windows.shape
    (gh, gw), (wh, ww) = layout.windows_grid, layout.window
    H, W = layout.grid
    x = windows.reshape(B, gh, gw, wh, ww, C).permute(0, 1, 3, 2, 4, 5)
    x = x.reshape(B, gh * wh, gw * ww, C)
    back = layout.shift
    if layout.shift_first:
        x = x[:, :H, :W]
        return torch.roll(x, back, dims=(1, 2)) if layout.shifted else x
    x = torch.roll(x, back, dims=(1, 2)) if layout.shifted else x
    return x[:, :H, :W]


def _regions(size: int, window: int, shift: int) -> Tensor:
    """Shifted-region index of each row (or column) of the padded map: (size,) long."""
    i = torch.arange(size)
    if shift == 0:
        return torch.zeros(size, dtype=torch.long)
    return (i >= size - window).long() + (i >= size - shift).long()


def shift_mask(layout: WindowLayout, device: torch.device | str | None = None) -> Tensor | None:
    """(windows, n, n) additive mask, −100 between tokens of different regions (None: no shift).
    Cached per layout and device: read only."""
    if not layout.shifted:
        return None
    return _shift_mask(layout, str(torch.device(device if device is not None else "cpu")))


@functools.lru_cache(maxsize=64)
def _shift_mask(layout: WindowLayout, device: str) -> Tensor:
    with torch.inference_mode(False):  # kept: a later backward pass may save it
        return _make_shift_mask(layout, device)


def _make_shift_mask(layout: WindowLayout, device: str) -> Tensor:
    (Hp, Wp), (wh, ww) = layout.padded, layout.window
    rows = _regions(Hp, wh, layout.shift[0])
    cols = _regions(Wp, ww, layout.shift[1])
    region = (rows[:, None] * 3 + cols[None, :]).reshape(Hp // wh, wh, Wp // ww, ww)
    region = region.permute(0, 2, 1, 3).reshape(-1, wh * ww)  # (windows, n)
    differ = region[:, None, :] != region[:, :, None]
    return (differ.to(torch.float32) * MASK_VALUE).to(device)


def relative_position_index(window: tuple[int, int], table: tuple[int, int]) -> Tensor:
    """(n, n) rows of a ((2·th − 1)·(2·tw − 1), heads) table of offsets for a (wh, ww) window
    (wh ≤ th, ww ≤ tw), rows ordered by (dy, dx)."""
    wh, ww = window
    th, tw = table
    y = torch.arange(wh).repeat_interleave(ww)
    x = torch.arange(ww).repeat(wh)
    dy = y[:, None] - y[None, :] + th - 1
    dx = x[:, None] - x[None, :] + tw - 1
    return dy * (2 * tw - 1) + dx
