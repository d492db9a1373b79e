"""CapturedModel: a user's nn.Module with the interface the rest of vitviz expects of a ViT.

``forward_explained`` runs the user's own forward pass inside ``capture_attention`` and hands
back ViTOutput, so analysis, gradient methods, export and the window treat it like any model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from torch import Tensor, nn

from vitviz.model.vit import ViTOutput
from vitviz.modelcode.blocks import BlockWatch, pick_blocks, watch_blocks
from vitviz.modelcode.capture import CaptureLog, capture_attention
from vitviz.modelcode.errors import ModelCodeError


@dataclass
class ModelCodeConfig:
    """What vitviz knows of a model-code model; fields named as in ViTConfig."""

    image_size: tuple[int, int]  # (H, W) the model takes
    patch_size: int
    num_classes: int
    depth: int  # layers with captured attention
    heads: int
    dim: int  # token width D (0 when unknown)
    num_prefix_tokens: int  # tokens before the patches: CLS, distillation, registers
    in_channels: int = 3
    source: str = ""  # "FILE.py:NAME"

    @property
    def grid_size(self) -> tuple[int, int]:
        return (self.image_size[0] // self.patch_size, self.image_size[1] // self.patch_size)

    @property
    def num_patches(self) -> int:
        gh, gw = self.grid_size
        return gh * gw

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["image_size"] = list(self.image_size)
        return d


def extract_logits(output: Any) -> Tensor:
    """The logits in what a model returned: a tensor, a tuple (first), ``.logits`` or a dict."""
    for _ in range(3):
        if isinstance(output, Tensor):
            return output
        if isinstance(output, Mapping) and "logits" in output:
            output = output["logits"]
        elif isinstance(getattr(output, "logits", None), Tensor):
            output = output.logits
        elif isinstance(output, (tuple, list)) and output:
            output = output[0]
        else:
            break
    raise ModelCodeError(
        f"the model returned a {type(output).__name__}; vitviz needs the logits as a tensor, "
        "a tuple starting with them, or an object with .logits"
    )


@dataclass
class RawRun:
    """One captured forward pass before the attention layers are chosen."""

    logits: Tensor  # (B, C)
    log: CaptureLog
    watch: BlockWatch | None


def run_captured(inner: nn.Module, x: Tensor, hidden_states: bool) -> RawRun:
    """The user's forward pass on x (B, 3, H, W) with attention (and block outputs) noted."""
    with ExitStack() as stack:
        log = stack.enter_context(capture_attention(batch=x.shape[0]))
        watch = stack.enter_context(watch_blocks(inner)) if hidden_states else None
        logits = extract_logits(inner(x))
    return RawRun(logits, log, watch)


class CapturedModel(nn.Module):
    """Wraps the user's module (``inner``, unchanged) with ``forward_explained`` and ``config``."""

    def __init__(self, inner: nn.Module, config: ModelCodeConfig) -> None:
        super().__init__()
        self.inner = inner
        self.config = config

    @property
    def num_prefix_tokens(self) -> int:
        return self.config.num_prefix_tokens

    def forward(self, x: Tensor) -> Tensor:
        """(B, 3, H, W) -> (B, C) logits; the user's forward, nothing captured."""
        return extract_logits(self.inner(x))

    def grid_for(self, x: Tensor) -> tuple[int, int]:
        p = self.config.patch_size
        return (x.shape[-2] // p, x.shape[-1] // p)

    def forward_explained(
        self, x: Tensor, capture_attention: bool = True, hidden_states: bool = False
    ) -> ViTOutput:
        """Logits (B, C), L × (B, H, N, N) attention, L × (B, N, D) block outputs (or [])."""
        grid = self.grid_for(x)
        prefix = self.config.num_prefix_tokens
        if not capture_attention:
            return ViTOutput(self.forward(x), [], [], grid, prefix)
        run = run_captured(self.inner, x, hidden_states)
        tokens = prefix + grid[0] * grid[1]
        attentions = [a for a in run.log.attentions if a.shape[-1] == tokens]
        if not attentions:
            raise ModelCodeError(
                f"no attention over {tokens} tokens ({prefix} prefix + {grid[0]}×{grid[1]} "
                f"patches) was seen in this forward pass ({run.log.summary()})"
            )
        hidden = []
        if run.watch is not None:
            hidden = pick_blocks(run.watch, len(attentions), tokens, x.shape[0])
        return ViTOutput(run.logits, attentions, hidden, grid, prefix)
