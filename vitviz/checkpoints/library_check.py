"""The library's own model checks vitviz's reading of a checkpoint, once per file.

When a converter knows which library architecture a checkpoint is (a timm folder's
``architecture``, ``--arch``, or a bare state dict recognised by its tensors) and that library
is importable, its model is built holding the file's own tensors (no network, no remote code;
the tensors come from vitviz's safe reading, safetensors or ``weights_only``) and both models run
one seeded probe image. How the library's model is built and read is the family's (its
``Reference.how``, a ``families.reference.LibraryReference``, DESIGN §4): this module only asks
it, runs both models, compares and words the result:

    logits     max |ours - theirs| / max |theirs|        must be <= 1e-4
    attention  max |ours - theirs| over every layer      must be <= 1e-5

Where float32 misses those limits, both models run again in float64 (the library's model and a
copy of vitviz's, cast; the same probe image) at the sizes that missed, and the checkpoint is
accepted only if they agree there to 1e-9 (logits relative, attention absolute): float32's
rounding in another order (a sharpened attention, a deep model's large logits) shrinks by about
2**29 in float64, a mistake (a wrong weight, eps or rule) does not. The note gives both numbers.
A retry that would not fit in the memory free (``core.host_memory``) refuses with the float32
numbers.

The probe runs at the model's own size and at each size vitviz analyses that is not it (an
image processor's crop, a sidecar's ``preprocessing.image_size``, the sizes of ``resize: "fit"``:
``probe_sizes``), where the position table is resampled: the library's model resamples its own
(the reference's ``any_size``; a timm class without a dynamic size is set to each size by its
own ``set_input_size``, the reference's ``at_size``); one that can't run there leaves that size
unchecked, said in the note, and vitviz's own model runs there alone (``size_guard``): where it
can't, the checkpoint is refused naming the size, never opened to fail every analysis. A
difference at any size refuses the checkpoint with both numbers and the size. The result is
kept in vitviz's cache folder under a key of the file (size, mtime,
a hash of its first and last MiB), the settings, the probe sizes and the library's and vitviz's
versions, so the second open costs nothing.
``VITVIZ_NO_LIBRARY_CHECK=1`` skips the check (a note says so).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass, field, fields, replace
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from torch import Tensor, nn

from vitviz import __version__ as vitviz_version
from vitviz.checkpoints.atomic import atomic_path
from vitviz.checkpoints.cache import cache_home
from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.folders import folder_weights
from vitviz.checkpoints.probe_sizes import (
    Size,
    analysed_sizes,
    fit_words,
    probe_sizes,
    size_words,
)
from vitviz.checkpoints.size_guard import RUN_ERRORS, cannot_run
from vitviz.core.host_memory import host_budget
from vitviz.imaging import Preprocessing
from vitviz.kindapi import ModelKind

if TYPE_CHECKING:
    from vitviz.checkpoints.families.reference import LibraryReference

LOGITS_RTOL = 1e-4
ATTENTION_ATOL = 1e-5
# the float64 retry's limits (logits relative, attention absolute): float64 rounds 2**29 times
# finer than float32, so a float32 miss of 1e-4 that is rounding alone comes back near 1e-13
# (1e-16 amplified as float32's was); a mistake is the function's, the same in either precision,
# and was at least 1e-4 to be retried at all: 1e-9 is 5 orders below it and 4 above rounding
FLOAT64_RTOL = 1e-9
FLOAT64_ATOL = 1e-9
USABLE_FRACTION = 0.9  # of the memory free, for the float64 retry: the rest is left to the system
SKIP_ENV = "VITVIZ_NO_LIBRARY_CHECK"
# part of every cached result's key: raised whenever what a check decides changes, so no
# result written by an older rule is trusted (a build failure read as a note, not a refusal)
# 3: the probe runs at every size analysed, not the model's own alone; 4: a float32 miss is
# retried in float64; 5: a relative position bias is resampled at the sizes analysed, and a
# timm class without a dynamic size is checked there through its set_input_size; 6: vitviz's
# own model runs alone at each size analysed the library's can't, refused where it fails
CHECK_RULES = 6
_MIB = 1 << 20


@dataclass(frozen=True)
class Reference:
    """The library architecture a conversion claims to be."""

    library: str  # "timm"
    arch: str
    model_args: dict[str, Any]
    settings: str = ""  # the settings built beside the name's, in words: "6 heads, mean pooling"
    shown_as: str = ""  # what the note calls it when not ``arch`` ("VisionTransformer")
    # why the library's model can't be built as the file has it (a setting its model args
    # can't give: "its SwinTransformer has no keyword for LayerNorm eps 1e-6"): the check is
    # skipped with a note saying so; "" when it can
    unexpressible: str = ""
    # how the family builds and reads the library's model (not part of the cache key)
    how: LibraryReference = field(kw_only=True, compare=False, repr=False)

    def described(self) -> dict[str, Any]:
        """The claim without ``how``: what keys the cached result."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "how"}

    @property
    def label(self) -> str:
        """ "timm's vit_tiny_patch16_224 with 6 heads, mean pooling"."""
        whose = possessive(self.library)
        what = self.shown_as or self.arch
        named = f"{whose} {what}" if what else f"{self.library}'s model"
        return named + (f" with {self.settings}" if self.settings else "")


@dataclass(frozen=True)
class CheckResult:
    """``logits``: max relative error; ``attention``: max absolute error (None: not compared)."""

    library: str  # e.g. "timm 1.0.31"
    arch: str  # the architecture checked, with the settings built beside its name's
    logits: float | None
    attention: float | None
    problem: str | None = None  # why it could not be compared
    logits_limit: float = LOGITS_RTOL  # the family's, when tighter than the project's
    attention_limit: float = ATTENTION_ATOL
    unfit: bool = False  # the library's named architecture does not take the file's tensors
    sizes: tuple[Size, ...] = ()  # the probe sizes (H, W) compared, the model's own first
    failed_at: Size | None = None  # the first of them whose numbers are beyond the limits
    unchecked: str = ""  # the sizes analysed the probe could not run at, and why
    # the float64 retry after a float32 miss, at the sizes that missed (None: not run)
    float64_logits: float | None = None
    float64_attention: float | None = None
    float64_problem: str = ""  # why the retry did not run or finish ("" when it ran)
    # the first size analysed, unchecked, at which vitviz's own model fails, and its reason
    cannot_run_at: Size | None = None
    cannot_run: str = ""

    @property
    def within_float32(self) -> bool:
        """The float32 numbers within the limits."""
        if self.logits is None:
            return False
        return self.logits <= self.logits_limit and (
            self.attention is None or self.attention <= self.attention_limit
        )

    @property
    def exact_in_float64(self) -> bool:
        """Missed in float32, and the same function in float64 (within 1e-9)."""
        if self.float64_logits is None:
            return False
        return self.float64_logits <= min(FLOAT64_RTOL, self.logits_limit) and (
            self.attention is None
            or (self.float64_attention is not None and self.float64_attention <= FLOAT64_ATOL)
        )

    @property
    def ok(self) -> bool:
        if self.cannot_run_at is not None:
            return False
        if self.logits is None:
            return self.problem is not None and not self.unfit
        return self.within_float32 or self.exact_in_float64

    def note(self) -> str:
        if self.problem is not None:
            return f"not checked against {self.library}: {self.problem}"
        # a library whose attention could not be read compares the logits alone: said
        att = ", attention not compared" if self.attention is None else (
            f", attention {self.attention:.1g}"
        )  # fmt: skip
        at = ""
        if len(self.sizes) > 1 or self.unchecked:
            at = " at " + " and ".join(size_words(s) for s in self.sizes)
        skipped = f"; not checked at {self.unchecked}" if self.unchecked else ""
        numbers = f"logits {self.logits:.1g}{att}"
        if not self.within_float32 and self.exact_in_float64:
            limits = f"limit {self.logits_limit:g}" + (
                "" if self.attention is None else f", {self.attention_limit:g}"
            )
            numbers = (
                f"in float32 {numbers} (over the {limits}: float32's rounding), "
                "checked in float64: "
                f"{self.float64_words()} (limit {FLOAT64_RTOL:g}), the same function"
            )
        return (
            f"checked against {self.library}: vitviz's reading of {self.arch}{at}: {numbers}"
            f"{skipped}"
        )

    def float64_words(self) -> str:
        """ "logits 3e-15, attention 2e-17": the float64 retry's numbers."""
        if self.float64_logits is None:
            return ""
        att = "" if self.float64_attention is None else f", attention {self.float64_attention:.1g}"
        return f"logits {self.float64_logits:.1g}{att}"


def possessive(library: str) -> str:
    """ "timm's", "transformers'"."""
    return library + ("'" if library.endswith("s") else "'s")


def cache_dir() -> Path:
    """vitviz's own cache folder: ``VITVIZ_CACHE_DIR``, else ``$XDG_CACHE_HOME/vitviz``."""
    given = os.environ.get("VITVIZ_CACHE_DIR")
    return Path(given) if given else cache_home() / "vitviz"


def weights_file(path: Path) -> Path:
    return folder_weights(path) if path.is_dir() else path


def file_key(path: Path) -> str:
    """Size, mtime and a hash of the first and last MiB of ``path``."""
    st = path.stat()
    h = hashlib.sha1(f"{st.st_size}:{st.st_mtime_ns}".encode())
    with open(path, "rb") as f:
        h.update(f.read(_MIB))
        if st.st_size > 2 * _MIB:
            f.seek(-_MIB, os.SEEK_END)
            h.update(f.read(_MIB))
    return h.hexdigest()


def library_version(library: str) -> str | None:
    """ "timm 1.0.31" for an installed library (from its metadata: nothing is imported)."""
    try:
        return f"{library} {metadata.version(library)}"
    except metadata.PackageNotFoundError:
        return None


def checked(
    model: nn.Module,
    path: Path,
    ref: Reference,
    force: bool = False,
    *,
    kind: ModelKind,
    sizes: list[Size] | None = None,
) -> CheckResult | None:
    """The check of ``model`` (vitviz's, from ``path``, of ``kind``) against ``ref`` at its own
    size and each of ``sizes`` (H, W) (those analysed: ``probe_sizes.analysed_sizes``), from the
    cache when it was made before; None when the library is not importable or the check is
    switched off."""
    version = library_version(ref.library)
    if version is None or (os.environ.get(SKIP_ENV) == "1" and not force):
        return None
    if ref.unexpressible:  # never a silent skip: the note names the setting
        return CheckResult(version, ref.label, None, None, ref.unexpressible)
    weights = weights_file(path)
    mine = f"vitviz {vitviz_version}, check rules {CHECK_RULES}"
    probes = probe_sizes(model.config.image_size, sizes or [])
    config = json.dumps(
        [model.config.to_dict(), ref.described(), version, mine, probes],
        sort_keys=True,
        default=str,
    )
    key = hashlib.sha1((file_key(weights) + config).encode()).hexdigest()
    where = cache_dir() / "library_checks" / f"{key}.json"
    if not force:
        try:
            return _from_json(json.loads(where.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError):
            pass
    result = compare(model, weights, ref, version, kind=kind, sizes=probes)
    if result.problem is not None and not result.unfit:
        return result  # a passing problem (the library could not build it here): not kept
    try:
        with atomic_path(where) as tmp:
            tmp.write_text(json.dumps(asdict(result)), encoding="utf-8")
    except OSError:
        pass  # a cache that can't be written only costs the next open another check
    return result


def check_or_refuse(
    model: nn.Module,
    path: Path,
    ref: Reference | None,
    notes: list[str],
    kind: ModelKind,
    prep: Preprocessing | None = None,
) -> None:
    """Note the check's result, or refuse the checkpoint when the numbers differ, or when
    vitviz's own model can't run at a size analysed that the library's could not check
    (``kind``: the model's, resolved by the loader; ``prep``: its preprocessing, whose input
    sizes are probed beside the model's own)."""
    stride = kind.input_stride(model)
    analysed = analysed_sizes(prep, stride)
    others = probe_sizes(model.config.image_size, analysed)[1:]
    if ref is None:  # nothing to check against: vitviz's model alone at the sizes analysed
        _runs_or_refuse(model, path, kind, others, prep)
        return
    if os.environ.get(SKIP_ENV) == "1":
        notes.append(f"not checked against {ref.library} ({SKIP_ENV}=1)")
        _runs_or_refuse(model, path, kind, others, prep)
        return
    result = checked(model, path, ref, kind=kind, sizes=analysed)
    if result is None:  # never a silent skip: the note says the library is not there
        notes.append(f"not checked against {ref.library}: it is not installed")
        _runs_or_refuse(model, path, kind, others, prep)
        return
    if result.unfit:  # the file is not what its reading claims: nothing could vouch for it
        raise CheckpointError(
            f"{path.name}: {ref.label} {result.problem}; "
            "refused rather than shown unchecked: give the architecture it was saved from "
            "(--arch NAME)."
        )
    if result.cannot_run_at is not None:  # the check's own run of vitviz's model, kept
        _refuse(path, kind, model, result.cannot_run_at, result.cannot_run, prep)
    if result.problem is not None:  # the library's model was not run at all
        _runs_or_refuse(model, path, kind, others, prep)
    if not result.ok:
        att = (
            ""
            if result.attention is None
            else f", attention {result.attention:.2g} (limit {result.attention_limit:g})"
        )
        at = "" if result.failed_at is None else f" at {size_words(result.failed_at)}"
        if result.failed_at is not None and list(result.failed_at) != list(result.sizes[0]):
            at += " (a size analysed; its own is " + size_words(result.sizes[0]) + ")"
        retried = (
            f"; in float64 too: {result.float64_words()} (limit {FLOAT64_RTOL:g})"
            if result.float64_logits is not None
            else f"; not retried in float64: {result.float64_problem}"
            if result.float64_problem
            else ""
        )
        raise CheckpointError(
            f"{path.name}: vitviz's reading of {ref.label} differs from {result.library}'s own "
            f"model{at}: logits {result.logits:.2g} (limit {result.logits_limit:g}){att}"
            f"{retried}; refused rather than shown wrong."
        )
    fit = "" if result.problem is not None else fit_words(prep, stride, result.sizes)
    notes.append(result.note() + (f" ({fit})" if fit else ""))


def _runs_or_refuse(
    model: nn.Module, path: Path, kind: ModelKind, sizes: list[Size], prep: Preprocessing | None
) -> None:
    """vitviz's ``model`` run alone at each of ``sizes`` (those analysed, not its own): refused
    at the first it can't run at."""
    stuck = cannot_run(model, sizes, kind)
    if stuck is not None:
        _refuse(path, kind, model, *stuck, prep)


def _refuse(
    path: Path,
    kind: ModelKind,
    model: nn.Module,
    size: Size,
    why: str,
    prep: Preprocessing | None,
) -> None:
    """The one-line refusal of a checkpoint whose network can't run at ``size``, a size
    analysed (DESIGN §4): the size, the network's reason, what to change."""
    own = size_words(model.config.image_size)
    if prep is not None and prep.resize == "fit":
        change = "give its sidecar's preprocessing resize 'crop' or 'squash'"
        what = "a size resize 'fit' gives"
    else:
        h, w = (int(n) for n in model.config.image_size)
        change = f"give its sidecar's preprocessing.image_size [{h}, {w}], its own"
        what = "the size analysed"
    raise CheckpointError(
        f"{path.name}: vitviz's {kind.label} can't run at {size_words(size)} ({what}; its own "
        f"is {own}): {why}; refused rather than opened to fail every analysis: {change}."
    )


def compare(
    model: nn.Module,
    weights: Path,
    ref: Reference,
    version: str,
    *,
    kind: ModelKind,
    sizes: list[Size] | None = None,
) -> CheckResult:
    """Build the library's model as the family's reference says, load the file's tensors, run
    both on one probe image at each of ``sizes`` (H, W; the model's own first, its own alone
    when None) and compare."""
    cfg = model.config
    how = ref.how
    limits = _limits(how)
    try:
        theirs = how.build(ref.arch, ref.model_args, cfg, weights)
    except RuntimeError as exc:
        if "state_dict" not in str(exc):
            problem = f"its model does not take these tensors ({type(exc).__name__})"
            return CheckResult(version, ref.label, None, None, problem, *limits)
        # torch's load_state_dict: the named architecture's tensors are not the file's
        problem = f"does not take this file's tensors ({_first_mismatch(exc)})"
        return CheckResult(version, ref.label, None, None, problem, *limits, True)
    except TypeError as exc:
        unknown = re.search(r"unexpected keyword argument '(\w+)'", str(exc))
        if unknown is None:
            problem = f"its model does not take these tensors ({type(exc).__name__})"
            return CheckResult(version, ref.label, None, None, problem, *limits)
        # the file's settings name one the library's model does not have: vitviz's reading
        # could not have followed it either
        problem = f"takes no setting {unknown.group(1)!r}, which the file gives"
        return CheckResult(version, ref.label, None, None, problem, *limits, True)
    except (
        ImportError,
        ValueError,
        KeyError,
        OSError,
        CheckpointError,
    ) as exc:
        problem = f"its model does not take these tensors ({type(exc).__name__})"
        return CheckResult(version, ref.label, None, None, problem, *limits)
    own = (int(cfg.image_size[0]), int(cfg.image_size[1]))
    probes = sizes or [own]
    rows = [_Row(own, *_probe(model, theirs, how, kind, own))]
    library = {own: theirs}  # the library's model at each size that missed, for the retry
    skipped: list[str] = []
    unprobed: list[Size] = []  # the sizes analysed vitviz's model did not run at
    anywhere = _any_size_model(ref, cfg, weights, theirs) if len(probes) > 1 else theirs
    own_only = isinstance(anywhere, str) and how.at_size is None
    if own_only:  # the library's model runs at its own size only
        where = " and ".join(size_words(s) for s in probes[1:])
        skipped.append(f"{where}, {'sizes' if len(probes) > 2 else 'a size'} analysed: {anywhere}")
        unprobed.extend(probes[1:])
    for size in [] if own_only else probes[1:]:
        # one model for every size, or a copy set to this one (kept only if it missed)
        theirs_here = _sized_model(ref, theirs, size) if isinstance(anywhere, str) else anywhere
        if isinstance(theirs_here, str):
            skipped.append(f"{size_words(size)}, a size analysed: {theirs_here}")
            unprobed.append(size)
            continue
        try:
            row = _Row(size, *_probe(model, theirs_here, how, kind, size))
        except RUN_ERRORS as exc:
            skipped.append(
                f"{size_words(size)}, a size analysed: the probe fails there ({_why(exc)})"
            )
            unprobed.append(size)  # either model may have failed: vitviz's runs alone
            continue
        rows.append(row)
        if _missed(row, limits):
            library[size] = theirs_here
    logits = max(r.logits for r in rows)
    compared = [r.attention for r in rows if r.attention is not None]
    attention = max(compared) if len(compared) == len(rows) else None
    failed = [r for r in rows if _missed(r, limits)]
    result = CheckResult(
        version,
        ref.label,
        logits,
        attention,
        None,
        *limits,
        sizes=tuple(r.size for r in rows),
        failed_at=failed[0].size if failed else None,
        unchecked="; ".join(skipped),
    )
    stuck = cannot_run(model, unprobed, kind)  # one forward a size, kept with the result
    if stuck is not None:
        return replace(result, cannot_run_at=stuck[0], cannot_run=stuck[1])
    if not failed:
        return result
    return replace(result, **_in_float64(model, library, how, kind, failed))


class _Row(NamedTuple):
    """One probe size's numbers: logits' relative error, attention's absolute error (None: not
    compared) and the bytes of the attention maps both models kept there."""

    size: Size
    logits: float
    attention: float | None
    held: int


def _missed(row: _Row, limits: tuple[float, float]) -> bool:
    """``row``'s numbers beyond the (logits, attention) ``limits``."""
    return row.logits > limits[0] or (row.attention is not None and row.attention > limits[1])


def _in_float64(
    model: nn.Module,
    library: dict[Size, nn.Module],
    how: LibraryReference,
    kind: ModelKind,
    missed: list[_Row],
) -> dict[str, Any]:
    """The float64 retry at the sizes that ``missed`` in float32: the library's models (cast
    in place: they are the check's own) and a copy of vitviz's ``model``, on the same probe
    image cast; CheckResult's ``float64_*`` fields. A retry that would not fit in the memory
    free, or that fails, gives its reason instead."""
    models = {id(m): m for m in [model, *library.values()]}
    numbers = sum(
        t.numel()
        for m in models.values()
        for t in [*m.parameters(), *m.buffers()]
        if t.is_floating_point()
    )
    # every model's tensors, and the maps both keep at the largest size, in 8 bytes a number;
    # float32's maps were 4: doubled (with the allocator's slack)
    needed = int(1.25 * (8 * numbers + 2 * max(r.held for r in missed))) + (16 << 20)
    try:
        free = host_budget()
    except ValueError as exc:  # VITVIZ_MEMORY_BUDGET that is not a size
        return {"float64_problem": str(exc)}
    if free is not None and needed > USABLE_FRACTION * free:
        need, room = needed / 2**20, USABLE_FRACTION * free / 2**20
        return {"float64_problem": f"it would need {need:,.0f} MB, {room:,.0f} MB is usable"}
    try:
        ours = copy.deepcopy(model).double()
        for m in library.values():
            m.double()
        rows = [_probe(ours, library[r.size], how, kind, r.size, torch.float64) for r in missed]
    except (*RUN_ERRORS, MemoryError) as exc:  # a model with no float64 path, or no memory
        return {"float64_problem": f"its float64 run fails ({_why(exc)})"}
    compared = [a for _, a, _ in rows if a is not None]
    return {
        "float64_logits": max(lg for lg, _, _ in rows),
        "float64_attention": max(compared) if len(compared) == len(rows) else None,
    }


def _probe(
    model: nn.Module,
    theirs: nn.Module,
    how: LibraryReference,
    kind: ModelKind,
    size: Size,
    dtype: torch.dtype = torch.float32,
) -> tuple[float, float | None, int]:
    """Both models on one seeded (1, C, H, W) image, made in float32 and cast to ``dtype``:
    (logits' relative error, attention's absolute error or None where not compared, the bytes
    of both models' attention maps)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, model.config.in_channels, *size, generator=g).to(dtype)
    ref_logits, ref_attn = how.read(theirs, x)
    with torch.no_grad():  # its kind says which of its outputs the library's are comparable with
        mine, attentions = kind.library_outputs(model, x)
    logits = _relative(mine, ref_logits)
    attention = None
    if ref_attn and attentions is not None:
        same = len(ref_attn) == len(attentions)
        attention = (
            max(_max_abs(a, b) for a, b in zip(attentions, ref_attn, strict=True))
            if same
            else float("inf")
        )
    maps = [*(ref_attn or []), *(attentions or [])]
    return logits, attention, sum(a.numel() * a.element_size() for a in maps)


def _any_size_model(ref: Reference, cfg: Any, weights: Path, theirs: nn.Module) -> nn.Module | str:
    """The library's model that runs at other input sizes (``how.any_size``), or why there is
    none, in words."""
    extra = ref.how.any_size
    if extra is None:
        return f"{possessive(ref.library)} model here runs at its own size only"
    if not extra:
        return theirs
    try:
        return ref.how.build(ref.arch, {**ref.model_args, **extra}, cfg, weights)
    except (*RUN_ERRORS, ImportError, KeyError, OSError, CheckpointError) as exc:
        return f"{possessive(ref.library)} model is not built to run at other sizes ({_why(exc)})"


def _sized_model(ref: Reference, theirs: nn.Module, size: Size) -> nn.Module | str:
    """The library's model made for ``size`` by its own rule (``how.at_size``, on a copy of
    ``theirs``), or why it can't be, in words."""
    assert ref.how.at_size is not None
    try:
        return ref.how.at_size(copy.deepcopy(theirs), size)
    except (*RUN_ERRORS, ImportError, KeyError, OSError) as exc:
        return f"{possessive(ref.library)} model can't be set to that size ({_why(exc)})"


def _why(exc: BaseException) -> str:
    """One short line of ``exc``."""
    text = " ".join(str(exc).split())
    text = text if len(text) <= 100 else text[:99] + "…"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _from_json(data: dict[str, Any]) -> CheckResult:
    """A cached result: JSON's lists made the size tuples again."""
    data["sizes"] = tuple(tuple(s) for s in data.get("sizes") or ())
    for name in ("failed_at", "cannot_run_at"):
        if data.get(name) is not None:
            data[name] = tuple(data[name])
    return CheckResult(**data)


def _first_mismatch(exc: RuntimeError) -> str:
    """The first of torch's ``load_state_dict`` complaints, in one line ("size mismatch for
    pos_embed: ...")."""
    lines = [line.strip() for line in str(exc).splitlines()[1:] if line.strip()]
    first = (lines[0] if lines else str(exc).splitlines()[0]).rstrip(".")
    return first if len(first) <= 160 else first[: first.find(",", 40) + 1 or 160] + " …"


def _limits(how: LibraryReference) -> tuple[float, float]:
    """The family's limits where tighter than the project's, else the project's."""
    rtol, atol = how.logits_rtol, how.attention_atol
    return (
        LOGITS_RTOL if rtol is None else min(rtol, LOGITS_RTOL),
        ATTENTION_ATOL if atol is None else min(atol, ATTENTION_ATOL),
    )


def _max_abs(a: Tensor, b: Tensor) -> float:
    if a.shape != b.shape:
        return float("inf")
    return float((a.double() - b.double()).abs().max())


def _relative(ours: Tensor, theirs: Tensor) -> float:
    scale = float(theirs.double().abs().max())
    return _max_abs(ours, theirs) / max(scale, 1e-12)
