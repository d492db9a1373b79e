"""vitviz's own network at each size analysed that the library check did not run it at
(DESIGN §4): a checkpoint whose network can't run where it would be analysed (a CrossViT's
position tables learnt at one size, a ConViT's square grid under ``resize: "fit"``) is refused
at open, naming the size and the network's own reason, never opened to fail every analysis.

The cost is one forward pass of one (1, C, H, W) probe per such size, in eval mode and without
gradients, at open only; the library check keeps its result with its own (``CheckResult``'s
``cannot_run_at``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from vitviz.checkpoints.probe_sizes import Size
from vitviz.kindapi import ModelKind

# what a network given a size it can't take raises (vitviz's own refusals are ValueErrors)
RUN_ERRORS = (RuntimeError, ValueError, TypeError, AssertionError, IndexError)
_GIST = 200  # characters of the network's reason kept in the one-line refusal


def cannot_run(model: nn.Module, sizes: Sequence[Size], kind: ModelKind) -> tuple[Size, str] | None:
    """The first of ``sizes`` (H, W) at which ``model`` (vitviz's, of ``kind``, of
    ``config.in_channels`` inputs) fails one forward pass of a seeded (1, C, H, W) probe, with
    the gist of its error; None when it runs at each. A size whose analysis the kind's
    ``check_memory`` refuses is not run (its analysis says so in its own line; a file is not
    refused for the memory of the machine it is opened on). The model's training mode is left
    as it was."""
    if not sizes:
        return None
    param = next(model.parameters(), None)
    was_training = model.training
    model.eval()
    try:
        for size in sizes:
            try:
                kind.check_memory(model, (int(size[0]), int(size[1])))
            except ValueError:
                continue  # beyond the memory here: the analysis refuses it, naming it
            g = torch.Generator().manual_seed(0)
            x = torch.randn(1, int(model.config.in_channels), *size, generator=g)
            if param is not None:
                x = x.to(device=param.device, dtype=param.dtype)
            try:
                with torch.no_grad():
                    model(x)
            except RUN_ERRORS as exc:
                return (int(size[0]), int(size[1])), gist(exc)
    finally:
        model.train(was_training)
    return None


def gist(exc: BaseException) -> str:
    """One line of ``exc``: a ValueError's sentence as it is (vitviz's networks refuse sizes
    with one), any other error with its type; at most ``_GIST`` characters."""
    text = " ".join(str(exc).split()).rstrip(".")
    if not isinstance(exc, ValueError) or not text:
        text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text if len(text) <= _GIST else text[: _GIST - 1] + "…"
