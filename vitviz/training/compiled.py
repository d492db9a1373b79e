"""torch.compile for the training step where it pays, and eager whenever it can't be had.

``compile="auto"`` compiles on CUDA only: a small ViT's step there is bound by launching
hundreds of small kernels, which compiling fuses; on the CPU compiling costs a C++ build and
gains little, so it runs only when asked (``"on"``). A compile that fails (no compiler, no
Triton, an unsupported operation) is reported once and the run goes on eagerly; it never ends
the run.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import nn

T = TypeVar("T")

# The torch.compile backend: this, else $VITVIZ_COMPILE_BACKEND, else inductor. Tests put a cheap
# one here ("eager", "aot_eager": the same graph run eagerly) or one that fails.
BACKEND: str | Callable[..., Any] | None = None
BACKEND_ENV = "VITVIZ_COMPILE_BACKEND"


def compile_backend() -> str | Callable[..., Any]:
    """The backend torch.compile is given."""
    return BACKEND or os.environ.get(BACKEND_ENV) or "inductor"


def compiler_cache() -> Path:
    """vitviz's own folder for torch.compile's caches: ``$XDG_CACHE_HOME/vitviz/torch-compile``
    (default ``~/.cache``), not torch's default ``$TMPDIR/torchinductor_<user>``."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    root = Path(base) if os.path.isabs(base) else Path.home() / ".cache"
    return root / "vitviz" / "torch-compile"


def use_compiler_cache() -> None:
    """Point Inductor's and Triton's caches at ``compiler_cache()`` unless the user set them.
    Before torch._dynamo is first imported (its import fixes Inductor's folder)."""
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(compiler_cache() / "inductor"))
    os.environ.setdefault("TRITON_CACHE_DIR", str(compiler_cache() / "triton"))


def wants_compile(mode: str, device: torch.device) -> bool:
    """Whether ``compile`` mode (auto | on | off) compiles on ``device``."""
    return mode == "on" or (mode == "auto" and device.type == "cuda")


def eager_module(model: nn.Module) -> nn.Module:
    """The module behind a torch.compile wrapper (its state_dict keys carry no ``_orig_mod.``)."""
    return getattr(model, "_orig_mod", model)


def _first_line(exc: BaseException) -> str:
    """'Type: first line of the message' of the error under any BackendCompilerFailed."""
    exc = getattr(exc, "inner_exception", None) or exc
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200]}" if text else type(exc).__name__


class CompiledOrEager:
    """``fn`` compiled when ``enabled``; after any failure of the compiled path, ``fn`` itself.

    ``run(body)`` calls ``body(f)`` with the compiled function, and once more with the eager one
    when that raises (compiling happens lazily, at the first forward and the first backward, so
    ``body`` should hold both); the random generators of the CPU and ``device`` are put back
    first, so the retried step draws what the failed one drew. ``note(message)`` hears why
    compiling was given up, once.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        enabled: bool,
        note: Callable[[str], Any],
        backend: str | Callable[..., Any] | None = None,
        device: torch.device | None = None,
    ) -> None:
        self.eager = fn
        self.note = note
        self.cuda = device if device is not None and device.type == "cuda" else None
        self.compiled: Callable[..., Any] | None = None
        if enabled:
            try:
                # each run compiles afresh: every run's step is the same code with a new model,
                # and over many runs in one process torch's per-code cache would fill (8
                # entries) and the step go eager without a word
                use_compiler_cache()
                torch._dynamo.reset()
                backend = backend or compile_backend()
                self.compiled = torch.compile(fn, backend=backend, dynamic=False)
            except Exception as exc:  # noqa: BLE001 - e.g. a Python torch.compile lacks
                self._give_up(exc)

    @property
    def active(self) -> bool:
        """True while the compiled function is in use."""
        return self.compiled is not None

    def _give_up(self, exc: BaseException) -> None:
        self.compiled = None
        self.note(f"torch.compile failed ({_first_line(exc)}); training goes on without it")

    def run(self, body: Callable[[Callable[..., Any]], T]) -> T:
        if self.compiled is None:
            return body(self.eager)
        cpu_rng = torch.get_rng_state()
        cuda_rng = None if self.cuda is None else torch.cuda.get_rng_state(self.cuda)
        try:
            return body(self.compiled)
        except Exception as exc:  # the step is done again, eagerly
            if not_the_compiler(exc):
                raise  # the step's own trouble: eager would fail the same way
            self._give_up(exc)
        # out of the except block, so the failed step's frames (its graph, its activations) are
        # freed before the step is done again
        torch.set_rng_state(cpu_rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state(cuda_rng, self.cuda)
        return body(self.eager)


def not_the_compiler(exc: BaseException) -> bool:
    """Errors of the step itself, which compiling did not cause and running eagerly would not
    cure: out of memory, a CUDA error such as a device-side assert (a label out of range)."""
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    accelerator = getattr(torch, "AcceleratorError", None)
    if accelerator is not None and isinstance(exc, accelerator):
        return True
    text = str(exc)
    return "device-side assert" in text or "CUDA error" in text
