"""Record every attention probability tensor a forward pass makes, without editing its code.

While ``capture_attention`` is active (a TorchFunctionMode, so it is scoped to the calling
thread and to the ``with`` block; nothing is patched and no hook is registered):

- a softmax over the last axis (``torch.softmax``, ``Tensor.softmax``, ``F.softmax``,
  ``nn.Softmax``) whose result is (B, H, N, N), or (B·H, N, N) with the heads inferred, is
  recorded as (B, H, N, N);
- ``F.scaled_dot_product_attention`` over a square score matrix is computed explicitly,
  softmax(QKᵀ·scale + mask) @ V, so its probabilities exist and are recorded;
- ``nn.MultiheadAttention`` (and so ``nn.TransformerEncoderLayer``) is asked for per-head
  weights whatever its caller passed; the caller still gets what it asked for, and the fused
  fast path is switched off for the duration.

Every recorded tensor lies on the path from the input to the output, so gradients with
respect to it (∂y/∂A) can be taken. Recording changes no output value. Inside
``padded_batch`` (a model run on a batch padded to the size its forward fixes) only the
caller's rows are recorded (nn.MultiheadAttention's then without a gradient path).

Given a ``HeadPlan`` or ``MatrixPlan`` (attention computed one head, or one image and one head,
at a time, grouped into layers by ``vitviz.modelcode.heads``), each piece is written into its
layer's (B, H, N, N) tensor, which is what the log records (``vitviz.modelcode.assembly``): the
model goes on with the piece's own values, on that tensor's gradient path. On the probing pass
(``probing``, one image) an (N, N) softmax is recorded as that image's one head, (1, 1, N, N).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.overrides import TorchFunctionMode

from vitviz.modelcode.assembly import ONE_MATRIX, Assembly, HeadPlan, MatrixPlan

_SOFTMAXES = frozenset({torch.softmax, torch.Tensor.softmax, F.softmax, torch.special.softmax})
_SDPA = F.scaled_dot_product_attention
_MHA = F.multi_head_attention_forward
_MHA_SIGNATURE = inspect.signature(F.multi_head_attention_forward)
_SDPA_NAMES = (
    "query",
    "key",
    "value",
    "attn_mask",
    "dropout_p",
    "is_causal",
    "scale",
    "enable_gqa",
)


@dataclass
class CaptureLog:
    """What one captured forward pass saw, in call order."""

    batch: int  # B of the model input (the padded batch while a FixedBatch model runs)
    keep: int | None = None  # rows kept of a padded batch (None: all): the caller's images
    attentions: list[Tensor] = field(default_factory=list)  # each (B, H, N, N), rows = queries
    sources: list[str] = field(default_factory=list)  # what made each: softmax / sdpa / mha
    softmax_calls: int = 0
    sdpa_calls: int = 0
    mha_calls: int = 0
    other_shapes: list[tuple[int, ...]] = field(default_factory=list)  # not square attention
    locate: Callable[[], Any] | None = None  # called at each record: where the model is
    places: list[Any] = field(default_factory=list)  # locate()'s answer per record (raw order)
    records: int = 0  # square attentions seen, each one-head softmax counted (raw order)
    matrices: bool = False  # record (N, N) softmaxes as one image's one head (probing B = 1)
    assembly: Assembly | None = None  # layers made of one-head (or one-matrix) softmaxes

    def add(self, attention: Tensor, source: str) -> None:
        self.attentions.append(attention)
        self.sources.append(source)

    def take(self, attention: Tensor, source: str) -> Tensor:
        """Record (B, H, N, N) ``attention``; returns what the model goes on with (itself, or
        for a one-head softmax of the plan, the same values on its layer tensor's path)."""
        index = self.records
        self.records += 1
        if self.locate is not None:
            self.places.append(self.locate())
        if self.assembly is not None:
            placed = self.assembly.one_head(index, attention)
            if placed is not None:
                return placed
        self.add(attention, source)
        return attention

    def check_heads(self) -> None:
        """ModelCodeError unless every layer of the plans got each of its pieces once."""
        if self.assembly is not None:
            self.assembly.check(self.batch)

    def note_other(self, shape: tuple[int, ...]) -> None:
        if len(self.other_shapes) < 8 and shape not in self.other_shapes:
            self.other_shapes.append(shape)

    def summary(self) -> str:
        """'3 softmax calls, 0 scaled_dot_product_attention calls, ...' for messages."""
        text = (
            f"{self.softmax_calls} softmax, {self.sdpa_calls} scaled_dot_product_attention "
            f"and {self.mha_calls} MultiheadAttention calls"
        )
        if self.other_shapes:
            shapes = ", ".join("×".join(map(str, s)) for s in self.other_shapes)
            text += f"; results that were not square attention: {shapes}"
        return text


def _record(log: CaptureLog, p: Tensor, source: str, heads: int | None = None) -> Tensor:
    """Record probabilities ``p`` if they are square attention; returns what the caller uses.

    (B, H, N, N) is recorded as it is. (B·H, N, N) is recorded as its (B, H, N, N) view and the
    caller gets that view flattened back, so the recorded tensor is the one the model goes on
    with (gradients reach it).
    """
    shape = tuple(p.shape)
    if p.ndim == 2 and shape[0] == shape[1]:
        return _matrix(log, p, shape)
    if p.ndim not in (3, 4) or shape[-1] != shape[-2]:
        log.note_other(shape)
        return p
    if p.ndim == 4:
        if shape[0] != log.batch:
            log.note_other(shape)
            return p
        return _kept(log, p, source)
    lead = shape[0]
    if heads:
        B, H = lead // heads, heads
    else:
        B = log.batch
        H = lead // B if lead % B == 0 else 0
    if H < 1 or lead != B * H:
        log.note_other(shape)
        return p
    return _kept(log, p.unflatten(0, (B, H)), source).flatten(0, 1)  # via (B, H, N, N)


def _matrix(log: CaptureLog, p: Tensor, shape: tuple[int, ...]) -> Tensor:
    """An (N, N) softmax: one image's one head, where a plan (or the probing pass) says so."""
    if log.assembly is not None and log.keep is None:
        placed = log.assembly.matrix(p, log.batch)
        if placed is not None:
            return placed
    if log.matrices and log.batch == 1 and log.keep is None:
        return _kept(log, p[None, None], ONE_MATRIX)[0, 0]
    log.note_other(shape)
    return p


def _kept(log: CaptureLog, a: Tensor, source: str) -> Tensor:
    """Record (B, H, N, N) ``a``, only its first ``log.keep`` rows for a padded batch; returns
    what the model goes on with, built from the recorded rows (so gradients reach them)."""
    if log.keep is None or log.keep >= a.shape[0]:
        return log.take(a, source)
    kept = log.take(a[: log.keep], source)
    return torch.cat([kept, a[log.keep :]])


def _explicit_sdpa(log: CaptureLog, call: dict[str, Any]) -> Tensor:
    """softmax(QKᵀ·scale + mask) @ V, recording the probabilities (torch's reference maths)."""
    q, k, v = call["query"], call["key"], call["value"]
    mask = call.get("attn_mask")
    L, S = q.shape[-2], k.shape[-2]
    scale = call.get("scale")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    if call.get("enable_gqa") and q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        repeat = q.shape[-3] // k.shape[-3]
        k = k.repeat_interleave(repeat, dim=-3)
        v = v.repeat_interleave(repeat, dim=-3)
    scores = (q @ k.transpose(-2, -1)) * scale  # (..., L, S)
    if call.get("is_causal"):
        causal = torch.ones(L, S, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
    if mask is not None:
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        else:
            scores = scores + mask
    p = _record(log, torch.softmax(scores, dim=-1), "scaled_dot_product_attention")
    dropout = call.get("dropout_p") or 0.0
    if dropout > 0.0:
        p = F.dropout(p, dropout, training=True)
    return p @ v


def _value_heads(a: dict[str, Any]) -> Tensor:
    """V of nn.MultiheadAttention's self-attention split into heads: (B, H, S, d)."""
    value, E, H = a["value"], a["embed_dim_to_check"], a["num_heads"]
    separate = a.get("use_separate_proj_weight")
    w = a["v_proj_weight"] if separate else a["in_proj_weight"][2 * E :]
    bias = a.get("in_proj_bias")
    v = F.linear(value, w, None if bias is None else bias[2 * E :])  # (S, B, E) or (S, E)
    if v.ndim == 2:
        v = v[:, None]
    S, B, _ = v.shape
    return v.reshape(S, B, H, E // H).permute(1, 2, 0, 3)  # (B, H, S, d)


def _attention_path(a: dict[str, Any], weights: Tensor, out: Tensor) -> tuple[Tensor, Tensor]:
    """Make the module output depend on a recorded copy of ``weights`` (values unchanged).

    ``weights`` (B, H, L, S) is a view made after torch used the probabilities, so it is off
    the gradient path. T, a detached copy, enters the output as g(T) − g(T).detach() with
    g(T) = out_proj(T @ V): exactly zero in value, and ∂out/∂T is the true derivative.
    """
    T = weights.detach().requires_grad_(True)
    v = _value_heads(a).detach()  # (B, H, S, d)
    mixed = (T @ v).permute(2, 0, 1, 3).flatten(2)  # (L, B, E)
    g = F.linear(mixed, a["out_proj_weight"].detach())
    if out.ndim == 2:
        g = g[:, 0]
    return T, out + (g - g.detach())


def _multihead(log: CaptureLog, args: tuple, kwargs: dict[str, Any]) -> Any:
    """F.multi_head_attention_forward with per-head weights recorded; same result to caller."""
    bound = _MHA_SIGNATURE.bind(*args, **kwargs)
    a = bound.arguments
    wanted = a.get("need_weights", True)
    average = a.get("average_attn_weights", True)
    a["need_weights"], a["average_attn_weights"] = True, False
    out, weights = _MHA(*bound.args, **bound.kwargs)  # weights (B, H, L, S) or (H, L, S)
    log.mha_calls += 1
    per_head = weights if weights.ndim == 4 else weights[None]
    square = per_head.shape[-1] == per_head.shape[-2] and a.get("bias_k") is None
    if square and per_head.shape[0] == log.batch and not a.get("add_zero_attn"):
        if log.keep is not None and log.keep < log.batch:  # a padded batch: values only
            log.take(per_head[: log.keep].detach(), "multihead_attention")
        else:
            if torch.is_grad_enabled() and out.requires_grad:
                per_head, out = _attention_path(a, per_head, out)
            log.take(per_head, "multihead_attention")
    else:
        log.note_other(tuple(per_head.shape))
    if not wanted:
        return out, None
    return out, (weights.mean(dim=-3) if average else weights)


class _Interceptor(TorchFunctionMode):
    """Routes softmax, scaled_dot_product_attention and MultiheadAttention calls to the log."""

    def __init__(self, log: CaptureLog) -> None:
        super().__init__()
        self.log = log

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        kwargs = kwargs or {}
        if func in _SOFTMAXES:
            out = func(*args, **kwargs)
            self.log.softmax_calls += 1
            dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
            if isinstance(out, Tensor) and isinstance(dim, int) and dim in (-1, out.ndim - 1):
                return _record(self.log, out, "softmax")
            if isinstance(out, Tensor):
                self.log.note_other(tuple(out.shape))
            return out
        if func is _SDPA:
            self.log.sdpa_calls += 1
            call = dict(zip(_SDPA_NAMES, args, strict=False)) | kwargs
            q, k = call.get("query"), call.get("key")
            if isinstance(q, Tensor) and isinstance(k, Tensor) and q.shape[-2] == k.shape[-2]:
                return _explicit_sdpa(self.log, call)
            return func(*args, **kwargs)
        if func is _MHA:
            return _multihead(self.log, args, kwargs)
        return func(*args, **kwargs)


# The log of the capture running on this thread (FixedBatch models tell it their padding).
_ACTIVE: ContextVar[CaptureLog | None] = ContextVar("vitviz_capture_log", default=None)


@contextmanager
def capture_attention(
    batch: int,
    heads: HeadPlan | None = None,
    matrices: MatrixPlan | None = None,
    probing: bool = False,
) -> Iterator[CaptureLog]:
    """Within the block, every attention the current thread computes lands in the log.

    ``batch`` is the batch size B of the model input (to split (B·H, N, N) into heads);
    ``heads`` and ``matrices`` group one-head (and one-image) softmaxes into layers (see the
    module's docstring); ``probing`` (B = 1) records (N, N) softmaxes as (1, 1, N, N).
    The MultiheadAttention fast path is off inside the block and restored after, even when the
    block raises.
    """
    log = CaptureLog(batch=batch, matrices=probing)
    if heads is not None or matrices is not None:
        log.assembly = Assembly(log.add, heads, matrices)
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    token = _ACTIVE.set(log)
    try:
        with _Interceptor(log):
            yield log
    finally:
        _ACTIVE.reset(token)
        torch.backends.mha.set_fastpath_enabled(fastpath)


@contextmanager
def padded_batch(batch: int, keep: int) -> Iterator[None]:
    """While a model that fixes its batch size runs ``batch`` rows of which the first ``keep``
    are the caller's, the active capture (if any) records those rows only."""
    log = _ACTIVE.get()
    if log is None:
        yield
        return
    saved = (log.batch, log.keep)
    log.batch, log.keep = batch, keep
    try:
        yield
    finally:
        log.batch, log.keep = saved
