"""Run a model whose forward pass fixes its batch size (``x.view(64, ...)``, as training scripts
write it) on any number of images: each call is padded to the batch it demands with copies of
its first image, and only the caller's rows of the outputs (and of the captured attention) are
kept. ``FixedBatch.check_rows`` makes sure rows don't mix (each row's output is its image's own).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from vitviz.modelcode.capture import padded_batch
from vitviz.modelcode.errors import ModelCodeError


def _rows(output: Any, batch: int, keep: int) -> Any:
    """Every tensor of ``output`` with ``batch`` rows cut to its first ``keep``."""
    if isinstance(output, Tensor):
        return output[:keep] if output.ndim and output.shape[0] == batch else output
    if isinstance(output, Mapping):
        return {k: _rows(v, batch, keep) for k, v in output.items()}
    if isinstance(output, (tuple, list)):
        return type(output)(_rows(v, batch, keep) for v in output)
    return output


class FixedBatch(nn.Module):
    """``inner`` run on batches padded to ``batch`` rows; the state dict is ``inner``'s."""

    def __init__(self, inner: nn.Module, batch: int, where: str = "") -> None:
        super().__init__()
        self.inner = inner
        self.batch = batch
        self.where = where  # 'model.py, line 31: x = x.view(64, 49, -1)', for the notes

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, Any]:  # type: ignore[override]
        return self.inner.state_dict(*args, **kwargs)

    def _run(self, x: Tensor) -> Any:
        """One padded call on at most ``batch`` images (B, C, H, W)."""
        n = x.shape[0]
        padded = torch.cat([x, x[:1].expand(self.batch - n, *x.shape[1:])]) if n < self.batch else x
        with padded_batch(self.batch, n):
            return _rows(self.inner(padded), self.batch, n)

    def forward(self, x: Tensor) -> Any:
        if x.shape[0] <= self.batch:
            return self._run(x)
        if torch.is_grad_enabled() and x.requires_grad:
            raise ModelCodeError(
                f"the model runs at most {self.batch} images at once (its batch size is fixed "
                f"in forward); got {x.shape[0]}"
            )
        parts = [self._run(x[i : i + self.batch]) for i in range(0, x.shape[0], self.batch)]
        if all(isinstance(p, Tensor) for p in parts):
            return torch.cat(parts)
        raise ModelCodeError(
            f"the model runs at most {self.batch} images at once (its batch size is fixed in "
            f"forward) and returns a {type(parts[0]).__name__}; got {x.shape[0]} images"
        )

    def check_rows(self, channels: int, size: tuple[int, int]) -> bool:
        """Whether the first row's output is the same whatever the other rows hold."""
        g = torch.Generator().manual_seed(0)
        x = torch.randn(self.batch, channels, *size, generator=g)
        device = next(self.inner.parameters(), torch.zeros(0)).device
        x = x.to(device)
        with torch.no_grad():
            alone = self._run(x[:1])
            mixed = _rows(self.inner(x), self.batch, 1)
        a = alone if isinstance(alone, Tensor) else None
        b = mixed if isinstance(mixed, Tensor) else None
        if a is None or b is None:
            from vitviz.modelcode.outputs import find_output, head_width

            width = head_width(self.inner)
            a = find_output(alone, classes=width).scores(alone)
            b = find_output(mixed, classes=width).scores(mixed)
        return bool(torch.allclose(a, b, atol=1e-5, rtol=1e-5))
