"""CapturedModel: a user's nn.Module with the interface the rest of vitviz expects of a ViT.

``forward_explained`` runs the user's own forward pass inside ``capture_attention`` and hands
back ViTOutput, so analysis, gradient methods, export and the window treat it like any model.
"""

from __future__ import annotations

import dataclasses
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from torch import Tensor, nn

from vitviz.blocks.vit import ViTOutput
from vitviz.modelcode.assembly import HeadPlan, MatrixPlan
from vitviz.modelcode.batching import FixedBatch
from vitviz.modelcode.blocks import BlockWatch, pick_blocks, watch_blocks
from vitviz.modelcode.calls import watch_calls
from vitviz.modelcode.capture import CaptureLog, capture_attention
from vitviz.modelcode.errors import ModelCodeError
from vitviz.modelcode.outputs import OutputReading, find_output, head_width


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
    outputs: str = "logits"  # what the forward returns: logits / probabilities / log-probabilities
    output_path: tuple = ()  # where in the returned value the (B, C) tensor is (OutputReading)
    # attention computed one head at a time: (record, layer, head, heads) per one-head softmax
    head_spots: tuple[tuple[int, int, int, int], ...] = ()
    # attention computed one image and one head at a time: heads per layer (0: not so), order
    matrix_heads: int = 0
    matrix_by_image: bool = True

    @property
    def head_plan(self) -> HeadPlan | None:
        """The grouping of one-head softmaxes into layers, None when the model has none."""
        if not self.head_spots:
            return None
        return HeadPlan({r: (layer, h, n) for r, layer, h, n in self.head_spots})

    @property
    def matrix_plan(self) -> MatrixPlan | None:
        """How (N, N) softmaxes made one image and one head at a time form layers, or None."""
        if not self.matrix_heads:
            return None
        tokens = self.num_prefix_tokens + self.num_patches
        return MatrixPlan(self.matrix_heads, tokens, self.matrix_by_image)

    @property
    def reading(self) -> OutputReading:
        return OutputReading(tuple(self.output_path), self.outputs)

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


def extract_logits(output: Any, model: nn.Module | None = None) -> Tensor:
    """The class scores in what ``model`` returned, as given: a tensor, or the (batch, classes)
    tensor of a tuple or dict (``logits`` by name first, else as wide as the model's last
    Linear)."""
    return find_output(output, classes=head_width(model) if model is not None else None).scores(
        output
    )


@dataclass
class RawRun:
    """One captured forward pass before the attention layers are chosen."""

    logits: Tensor  # (B, C): logits, or log-probabilities (see OutputReading)
    log: CaptureLog
    watch: BlockWatch | None
    reading: OutputReading  # where the scores were and what they are
    rows: int  # the batch the model ran (more than x's for a FixedBatch model: padded)

    def blocks(self, depth: int, tokens: int, keep: int) -> list[Tensor]:
        """L × (keep, N, D) block outputs, or [] when they can't be found."""
        if self.watch is None:
            return []
        return [h[:keep] for h in pick_blocks(self.watch, depth, tokens, self.rows)]


def run_captured(
    inner: nn.Module,
    x: Tensor,
    hidden_states: bool,
    reading: OutputReading | None = None,
    heads: HeadPlan | None = None,
    calls: bool = False,
    matrices: MatrixPlan | None = None,
) -> RawRun:
    """The user's forward pass on x (B, C, H, W) with attention (and block outputs) noted;
    the scores read as ``reading`` says, else found in the output (``find_output``). ``heads``
    and ``matrices`` group one-head (one-image) softmaxes into layers; ``calls`` (the probing
    pass) notes the module calls active at each attention (``log.places``, for
    ``plan_heads``) and records (N, N) softmaxes of one image as (1, 1, N, N)."""
    with ExitStack() as stack:
        log = stack.enter_context(
            capture_attention(x.shape[0], heads, matrices, probing=calls and x.shape[0] == 1)
        )
        watch = stack.enter_context(watch_blocks(inner)) if hidden_states else None
        if calls:
            stack.enter_context(watch_calls(inner, log))
        output = inner(x)
    log.check_heads()
    if reading is None:
        reading = find_output(output, x.shape[0], head_width(inner))
    fixed = isinstance(inner, FixedBatch) and x.shape[0] <= inner.batch
    return RawRun(reading.read(output), log, watch, reading, inner.batch if fixed else x.shape[0])


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
        """(B, C, H, W) -> (B, classes) logits (log-probabilities for a model that returns
        probabilities); the user's forward, nothing captured."""
        return self.config.reading.read(self.inner(x))

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
        run = run_captured(
            self.inner,
            x,
            hidden_states,
            self.config.reading,
            self.config.head_plan,
            matrices=self.config.matrix_plan,
        )
        tokens = prefix + grid[0] * grid[1]
        attentions = [a for a in run.log.attentions if a.shape[-1] == tokens]
        if not attentions:
            raise ModelCodeError(
                f"no attention over {tokens} tokens ({prefix} prefix + {grid[0]}×{grid[1]} "
                f"patches) was seen in this forward pass ({run.log.summary()})"
            )
        hidden = run.blocks(len(attentions), tokens, x.shape[0])
        return ViTOutput(run.logits, attentions, hidden, grid, prefix)
