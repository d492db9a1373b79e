"""Open a ViT written in a user's own Python file and capture its attention (no Qt).

``load_model_code(spec)`` imports the file, builds the model, loads its state dict safely and
wraps it in ``CapturedModel``, which gives analysis, gradients, export and the window the same
interface as vitviz's own ViT. ``capture_attention`` records the attention of any forward pass.

Importing this package is cheap (no torch): the spec, errors and ``scan_names`` are here for the
window's dialog; the rest is imported on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from vitviz.modelcode.errors import ModelCodeError
from vitviz.modelcode.spec import (
    ModelCodeSpec,
    NameInfo,
    guess_model_name,
    make_spec,
    parse_args_text,
    parse_target,
    read_class_names,
    scan_names,
)

_LAZY = {
    "CapturedModel": "vitviz.modelcode.adapter",
    "ModelCodeConfig": "vitviz.modelcode.adapter",
    "extract_logits": "vitviz.modelcode.adapter",
    "CaptureLog": "vitviz.modelcode.capture",
    "capture_attention": "vitviz.modelcode.capture",
    "load_model_code": "vitviz.modelcode.load",
}

__all__ = [
    "CaptureLog",
    "CapturedModel",
    "ModelCodeConfig",
    "ModelCodeError",
    "ModelCodeSpec",
    "NameInfo",
    "capture_attention",
    "extract_logits",
    "guess_model_name",
    "load_model_code",
    "make_spec",
    "parse_args_text",
    "parse_target",
    "read_class_names",
    "scan_names",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'vitviz.modelcode' has no attribute {name!r}")
