"""How the Swin kind opens a Swin written in a user's file: its model-code setting
(``swin_windows``) and the wrap into a ``SwinCodeModel`` (``vitviz.kinds.swin.modelcode``).

Torch-free at import (the model-code settings are checked on the GUI thread); ``claims`` and
``wrap`` import torch when called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vitviz.kindapi.sides import CodeModelRequest

if TYPE_CHECKING:
    from torch import nn

WINDOWS = "swin_windows"  # [[window, shift], ...] per block: the layout the attributes don't say


def _count(name: str, value: object, minimum: int) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= minimum:
        return value
    raise ValueError(f"{name} must be a whole number ≥ {minimum}, got {value!r}")


def parse_windows(value: object) -> tuple[tuple[int, int], ...]:
    """[[window, shift], ...] per block -> ((window, shift), ...), checked (ValueError)."""
    pairs = list(value) if isinstance(value, (list, tuple)) else None
    if pairs and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in pairs):
        return tuple((_count("window", w, 1), _count("shift", s, 0)) for w, s in pairs)
    raise ValueError(f"{WINDOWS} must be [[window, shift], ...] per block, got {value!r}")


class SwinCode:
    """The Swin's model-code side (``vitviz.kindapi.sides.ModelCodeSide``): a module holding
    window-attention modules (``window_size`` and ``num_heads``) is opened as a Swin."""

    settings = (WINDOWS,)

    def parse_setting(self, name: str, value: object) -> object:
        if name != WINDOWS:
            raise ValueError(f"the Swin kind reads no model-code setting {name!r}")
        return parse_windows(value)

    def claims(self, model: nn.Module) -> bool:
        from vitviz.kinds.swin.modelcode import window_attention_modules

        return bool(window_attention_modules(model))

    def wrap(self, inner: nn.Module, request: CodeModelRequest) -> tuple[nn.Module, str]:
        """A ``SwinCodeModel`` of ``inner`` after one probing forward pass, and a note."""
        from vitviz.kinds.swin.modelcode import swin_code_model

        windows = request.settings.get(WINDOWS)
        model = swin_code_model(
            inner,
            request.image_size,
            request.patch_size,
            windows,  # type: ignore[arg-type]  # checked by parse_windows
            request.target,
            request.in_channels,
        )
        note = (
            f"Swin: window attention captured in {len(model.attention_names)} blocks; patch size "
            f"{request.patch_size} from {request.patch_source}; window layout from "
            + ("the settings" if windows is not None else "the modules' attributes")
        )
        reading = model.config.reading
        if reading is not None and reading.note():
            note += f"; {reading.note()}"
        return model, note


SIDE = SwinCode()
