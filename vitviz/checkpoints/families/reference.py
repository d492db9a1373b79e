"""How a family's library builds and runs its model for the library check (DESIGN §4).

A family's ``Reference`` (``vitviz.checkpoints.library_check``) names the library architecture a
conversion claims to be; its ``how`` is a ``LibraryReference`` saying how that library's model is
built from the file's tensors and read: its logits and each attention layer's probabilities, with
the family's own forward hooks. The library check only builds, runs both models and compares, so a
new family brings its reference with it and edits no shared module.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import Tensor, nn

# (arch, model_args, vitviz's model config, the weights file) -> the library's model, eval mode,
# holding the file's tensors; raises ImportError, ValueError, ... when it does not take them
Build = Callable[[str, Mapping[str, Any], Any, Path], nn.Module]
# (the library's model, a (B, C, H, W) image) -> logits (B, classes) and each attention layer's
# probabilities in vitviz's order (L × (B, heads, N_q, N_k)), or None where not comparable
Read = Callable[[nn.Module, Tensor], tuple[Tensor, list[Tensor] | None]]
# (a copy of the library's model, built at its own size, the size (H, W)) -> that model made to
# run at the size by the library's own rule; raises TypeError, ValueError, ... when it can't be
Resize = Callable[[nn.Module, tuple[int, int]], nn.Module]


@dataclass(frozen=True)
class LibraryReference:
    """How one family's library model is built and read for the library check.

    ``logits_rtol`` / ``attention_atol``: a family's own limits, when tighter than the project's
    (1e-4 relative, 1e-5 absolute); a looser one is not taken (the check keeps the project's).

    ``any_size``: the model args that make the library's model run at an input size other than
    its own, its position table resampled by the library's own rule (timm's
    ``{"dynamic_img_size": True}``); ``{}``: the model as built does (``read`` tells it, as
    transformers' ``interpolate_pos_encoding``); None: it runs at its own size only, and a size
    vitviz analyses that is not the model's own stays unchecked, said in a note (DESIGN §4).

    ``at_size``: where the model ``any_size`` asks for can't be built (the library's class has
    no such argument), the library's other way to run its model at one other size: a copy of
    the model built at its own size, changed for that size by the library's own rule (timm's
    ``set_input_size``, which resamples its position tables and relative position biases);
    None: no other way."""

    build: Build
    read: Read
    logits_rtol: float | None = None
    attention_atol: float | None = None
    any_size: Mapping[str, Any] | None = None
    at_size: Resize | None = None
