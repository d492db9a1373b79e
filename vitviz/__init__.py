"""vitviz: look inside Vision Transformers.

The public API is importable from here; torch is imported only when a name that needs it is
first used, so ``import vitviz`` stays instant (the window shows before torch loads).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "ViTConfig": "vitviz.blocks",
    "VisionTransformer": "vitviz.blocks",
    "create_model": "vitviz.blocks",
    "save_checkpoint": "vitviz.checkpoints",
    "load_checkpoint": "vitviz.checkpoints",
    "LoadedModel": "vitviz.checkpoints",
    "CheckpointError": "vitviz.checkpoints",
    "analyze": "vitviz.pipeline.analysis",
    "Analysis": "vitviz.kinds.vit.analysis",
    "analyze_batch": "vitviz.kinds.vit.batch",
    "iter_analyses": "vitviz.kinds.vit.batch",
    "load_image": "vitviz.imaging",
    "ImageLoadError": "vitviz.imaging",
    "Preprocessing": "vitviz.imaging",
    "VitvizError": "vitviz.core.errors",
    "NotEnoughMemoryError": "vitviz.pipeline.memory",
    "NonFiniteError": "vitviz.core.finite",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'vitviz' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
