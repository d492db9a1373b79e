"""Runs one hostile case through vitviz's Python API and CLI and says what went wrong, if anything.

Shared by tests/project/test_fuzz.py (one test per case) and benchmarks/fuzz.py (thousands of
cases in
subprocesses). The API stage is ``vitviz.load_image`` (images) or ``load_checkpoint`` (checkpoints),
then ``analyze`` without gradients and, when that worked, with them (as the CLI's explain does);
the CLI stage is ``vitviz.cli.main`` in this process with stderr captured: ``explain`` of the image
with a tiny native checkpoint (and, for some cases, beside a valid image), or ``info`` and
``explain`` of the checkpoint with a valid image. While a case runs, an audit hook records
programs started and files written, RLIMIT_AS stops runaway allocations, vitviz's memory budget
is the harness's limit, a fake ``gs`` is first on PATH and temporary files go to a private
folder that is compared before and after; vitviz's own cache folder (library-check results) is
the one other place it may write. A case with a ``reference`` (hostile_kinds.py) that opens is
run beside the library's own model holding the file's tensors.

A case is clean when it ends accepted (where acceptance is allowed) or in vitviz's own error with
a one-line message, the CLI exits 2 for nothing usable (1 when part of a batch failed) with only
``vitviz-cli: ...`` lines on stderr, and nothing was started, written or allocated beyond the
limits. Problems are strings ``"<category>: <detail>"``; the categories:

- ``raw``: an exception that is not vitviz's own (or a CLI traceback / uncaught exception);
- ``message``: vitviz's error, but not one non-empty line (or, for a case with a
  ``reference``, the loader's catch-all wording a raw exception instead of naming the fault);
- ``verdict``: accepted where it must be refused, or refused where it must be accepted;
- ``nonfinite``: accepted with non-finite logits or attention (a "nan%" prediction);
- ``exact``: opened, but not as the library's own model holding the file's tensors runs (or
  opened where the library's model can't take them): cases with a ``reference`` only;
- ``exit``: the CLI's exit status or stderr is not what the API's outcome says it must be;
- ``program``: another program was started (audit hook, or the fake ``gs`` ran);
- ``file``: a file or folder was created, changed or removed outside the case's output folder;
- ``memory``: peak RSS grew by more than the limit, or an allocation failed;
- ``hang`` / ``crash``: found by whoever runs the case with a time limit (pytest, the benchmark).
"""

from __future__ import annotations

import contextlib
import io
import os
import resource
import stat
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hostile_files import Case

MEMORY_LIMIT_MIB = 2048  # peak RSS growth allowed per case: the 2 GB bound for large images
MEMORY_BUDGET_ENV = "VITVIZ_MEMORY_BUDGET"  # read by vitviz.pipeline.memory
CACHE_DIR_ENV = "VITVIZ_CACHE_DIR"  # read by vitviz.checkpoints.library_check
ADDRESS_SPACE_HEADROOM = 2 << 30  # RLIMIT_AS above the process's size while a case runs
CATEGORIES = (
    "raw",
    "message",
    "verdict",
    "nonfinite",
    "exact",
    "exit",
    "program",
    "file",
    "memory",
    "hang",
    "crash",
)

# --------------------------------------------------------------------------- the audit hook

PROGRAM_EVENTS = frozenset(
    {
        "subprocess.Popen",
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.fork",
        "os.forkpty",
        "os.startfile",
        "pty.spawn",
    }
)
# event -> indices of the path arguments it writes
WRITE_EVENTS: dict[str, tuple[int, ...]] = {
    "os.mkdir": (0,),
    "os.rename": (0, 1),
    "os.remove": (0,),
    "os.rmdir": (0,),
    "os.link": (0, 1),
    "os.symlink": (1,),
    "os.truncate": (0,),
    "os.chmod": (0,),
    "os.chown": (0,),
    "os.utime": (0,),
    "os.mkfifo": (0,),
    "os.mknod": (0,),
    "shutil.copyfile": (1,),
    "shutil.copymode": (1,),
    "shutil.copystat": (1,),
    "shutil.copytree": (1,),
    "shutil.rmtree": (0,),
    "shutil.move": (0, 1),
    "shutil.make_archive": (0,),
    "shutil.unpack_archive": (1,),
    "tempfile.mkstemp": (0,),
    "tempfile.mkdtemp": (0,),
}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


@dataclass
class _Armed:
    allowed: tuple[str, ...]  # folders (absolute, with a trailing separator) writes may go to
    programs: list[str] = field(default_factory=list)
    writes: list[str] = field(default_factory=list)


_ARMED: _Armed | None = None  # the hook is a no-op unless a case is running
_INSTALLED = False


def _text(path: Any) -> str | None:
    if isinstance(path, int) or path is None:
        return None
    try:
        return os.path.abspath(os.fsdecode(path))
    except (TypeError, ValueError):
        return None


def _hook(event: str, args: tuple) -> None:
    armed = _ARMED
    if armed is None:
        return
    if event in PROGRAM_EVENTS:
        armed.programs.append(f"{event}{_short(args)}")
        return
    if event == "open":
        path, mode, flags = (*args, None, None, None)[:3]
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & _WRITE_FLAGS
        )
        if writes:
            _check_write(armed, event, path)
        return
    indices = WRITE_EVENTS.get(event)
    if indices is not None:
        for i in indices:
            if i < len(args):
                _check_write(armed, event, args[i])


def _check_write(armed: _Armed, event: str, path: Any) -> None:
    text = _text(path)
    if text is None or text == os.devnull:
        return
    if not (text + os.sep).startswith(armed.allowed):
        armed.writes.append(f"{event} {text!r}")


def _short(args: tuple, limit: int = 160) -> str:
    text = repr(args)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def install_hook() -> None:
    """Install the audit hook once per process (it can never be removed; it is a no-op unless a
    case is running)."""
    global _INSTALLED
    if not _INSTALLED:
        sys.addaudithook(_hook)
        _INSTALLED = True


@contextlib.contextmanager
def armed(allowed: list[Path]) -> Iterator[_Armed]:
    global _ARMED
    state = _Armed(tuple(os.path.abspath(p) + os.sep for p in allowed))
    bytecode = sys.dont_write_bytecode
    sys.dont_write_bytecode = True  # a first import during a case would write a .pyc
    _ARMED = state
    try:
        yield state
    finally:
        _ARMED = None
        sys.dont_write_bytecode = bytecode


# --------------------------------------------------------------------------- snapshots, memory


def snapshot(folder: Path) -> dict[str, tuple]:
    """Every entry under ``folder`` (links not followed): relative path -> (type, size, mtime)."""
    out: dict[str, tuple] = {}
    if not folder.exists():
        return out
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            full = os.path.join(root, name)
            try:
                st = os.lstat(full)
            except OSError:
                continue
            key = os.path.relpath(full, folder)
            out[key] = (stat.S_IFMT(st.st_mode), st.st_size, st.st_mtime_ns)
    return out


def snapshot_diff(before: dict[str, tuple], after: dict[str, tuple]) -> list[str]:
    changes = [f"created {k!r}" for k in sorted(set(after) - set(before))]
    changes += [f"removed {k!r}" for k in sorted(set(before) - set(after))]
    changes += [f"changed {k!r}" for k in sorted(set(before) & set(after)) if before[k] != after[k]]
    return changes


def _status_kib(field_name: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def reset_peak() -> int:
    """Reset VmHWM to the current RSS (Linux); returns the RSS in KiB (0 where unknown)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    return _status_kib("VmRSS") or 0


def peak_kib() -> int:
    """VmHWM (peak RSS since the last reset) in KiB, else ru_maxrss."""
    hwm = _status_kib("VmHWM")
    return hwm if hwm is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


@contextlib.contextmanager
def address_space_limit(headroom: int = ADDRESS_SPACE_HEADROOM) -> Iterator[None]:
    """RLIMIT_AS at the current size + ``headroom`` while inside: a case that tries to allocate
    tens of GB fails fast instead of taking a shared machine down."""
    size_kib = _status_kib("VmSize")
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if size_kib is None:
        yield
        return
    limit = size_kib * 1024 + headroom
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


# --------------------------------------------------------------------------- the environment


FAKE_GS = """#!/bin/sh
# A stand-in for Ghostscript: if vitviz (or Pillow under it) ever starts it, this file shows it.
echo "$0 $*" >> '{witness}/ghostscript-started'
exit 0
"""


@dataclass
class FuzzEnv:
    """What every case needs: a tiny native checkpoint (for images), a valid image (for
    checkpoints), a fake Ghostscript on PATH and its witness folder, a private temp folder."""

    root: Path
    native: Path
    control_image: Path
    witness: Path
    temp: Path
    bin: Path
    loaded: Any = None  # the native checkpoint, loaded once

    @property
    def cache(self) -> Path:
        """vitviz's cache folder while a case runs."""
        return self.root / "cache"

    @classmethod
    def open(cls, root: Path, load: bool = True) -> FuzzEnv:
        """The environment under ``root`` (made by ``create``); ``load`` the native checkpoint."""
        env = cls(
            root=root,
            native=root / "model" / "tiny.safetensors",
            control_image=root / "control" / "control.png",
            witness=root / "witness",
            temp=root / "temp",
            bin=root / "bin",
        )
        if load:
            from vitviz.checkpoints import load_checkpoint

            env.loaded = load_checkpoint(env.native)
        return env

    @classmethod
    def create(cls, root: Path, load: bool = True) -> FuzzEnv:
        """Write the checkpoint, the valid image and the fake Ghostscript under ``root``."""
        from conftest import CLASS_NAMES, random_vit
        from hostile_images import _pixels
        from PIL import Image

        from vitviz.checkpoints import save_checkpoint

        env = cls.open(root, load=False)
        for folder in (env.native.parent, env.control_image.parent, env.witness, env.temp, env.bin):
            folder.mkdir(parents=True, exist_ok=True)
        for name in ("gs", "gsc", "gswin32c", "gswin64c"):
            exe = env.bin / name
            exe.write_text(FAKE_GS.format(witness=env.witness))
            exe.chmod(0o755)
        save_checkpoint(random_vit(0), env.native, class_names=CLASS_NAMES)
        Image.fromarray(_pixels((48, 40), 11)).save(env.control_image)
        return cls.open(root, load=load)

    @contextlib.contextmanager
    def activated(self) -> Iterator[None]:
        """Fake ``gs`` first on PATH (Pillow's cached answer reset), temp files go to ``temp``."""
        from PIL import EpsImagePlugin

        saved = {k: os.environ.get(k) for k in ("PATH", "TMPDIR", MEMORY_BUDGET_ENV, CACHE_DIR_ENV)}
        saved_gs = EpsImagePlugin.gs_binary
        saved_tempdir = tempfile.tempdir
        os.environ["PATH"] = f"{self.bin}{os.pathsep}{saved['PATH'] or ''}"
        os.environ["TMPDIR"] = str(self.temp)
        # vitviz plans an analysis's memory against this budget: the same as the harness's limit.
        os.environ[MEMORY_BUDGET_ENV] = f"{MEMORY_LIMIT_MIB}M"
        # vitviz's own cache (library-check results): the one folder outside a case's output
        # it may write to (run_case allows it)
        os.environ[CACHE_DIR_ENV] = str(self.cache)
        tempfile.tempdir = str(self.temp)
        EpsImagePlugin.gs_binary = None
        install_hook()
        import torch

        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # tiny models: one thread is fastest, and fair on a busy machine
        try:
            yield
        finally:
            torch.set_num_threads(threads)
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            tempfile.tempdir = saved_tempdir
            EpsImagePlugin.gs_binary = saved_gs


# --------------------------------------------------------------------------- one case


@dataclass
class Outcome:
    """What happened to one case: ``verdict`` accepted/refused, problems (empty when clean)."""

    name: str
    kind: str
    expect: str
    verdict: str = "refused"
    problems: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)  # vitviz's messages, for the report
    seconds: float = 0.0
    peak_growth_mib: float = 0.0  # peak RSS during the case above the RSS before it
    peak_rss_mib: float = 0.0  # peak RSS of the process during the case

    @property
    def clean(self) -> bool:
        return not self.problems

    def categories(self) -> set[str]:
        return {p.split(":", 1)[0] for p in self.problems}

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "expect": self.expect,
            "verdict": self.verdict,
            "problems": self.problems,
            "messages": self.messages,
            "seconds": round(self.seconds, 4),
            "peak_growth_mib": round(self.peak_growth_mib, 1),
            "peak_rss_mib": round(self.peak_rss_mib, 1),
        }


def vitviz_error_types() -> tuple[type[BaseException], ...]:
    """The error types vitviz raises for bad input (what exists in this tree)."""
    import importlib

    from vitviz.checkpoints import CheckpointError
    from vitviz.imaging import ImageLoadError

    found: list[type[BaseException]] = [ImageLoadError, CheckpointError]
    for module, name in (
        ("vitviz.core.finite", "NonFiniteError"),
        ("vitviz.pipeline.memory", "NotEnoughMemoryError"),
    ):
        with contextlib.suppress(ImportError, AttributeError):
            found.append(getattr(importlib.import_module(module), name))
    return tuple(found)


def is_vitviz_error(exc: BaseException) -> bool:
    """vitviz's own error: a known type, or any exception class defined in a vitviz module."""
    if isinstance(exc, vitviz_error_types()):
        return True
    return any(
        cls.__module__.split(".")[0] == "vitviz" and issubclass(cls, Exception)
        for cls in type(exc).__mro__
    )


def _is_memory_error(exc: BaseException) -> bool:
    text = str(exc).lower()
    return (
        isinstance(exc, MemoryError)
        or "can't allocate memory" in text
        or ("cannot allocate memory" in text)
    )


def _describe(exc: BaseException) -> str:
    where = traceback.extract_tb(exc.__traceback__)
    at = f" at {Path(where[-1].filename).name}:{where[-1].lineno}" if where else ""
    text = " ".join(str(exc).split())
    text = text if len(text) <= 200 else text[:199] + "…"
    return f"{type(exc).__module__}.{type(exc).__qualname__}: {text}{at}"


class _Stage:
    """Runs API calls, sorting each exception into refused / raw / memory / message."""

    def __init__(self, outcome: Outcome) -> None:
        self.outcome = outcome
        self.loaded: Any = None  # the checkpoint, when load_checkpoint opened it

    def call(self, label: str, fn: Callable[[], Any]) -> tuple[bool, Any]:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # a warning would reach the user's terminal
                return True, fn()
        except Exception as exc:  # noqa: BLE001 - sorting every failure is the point
            if _is_memory_error(exc) and not is_vitviz_error(exc):
                self.outcome.problems.append(f"memory: {label}: {_describe(exc)}")
            elif not is_vitviz_error(exc):
                self.outcome.problems.append(f"raw: {label}: {_describe(exc)}")
            else:
                message = str(exc)
                self.outcome.messages.append(message)
                if not message.strip() or "\n" in message.strip() or "\r" in message:
                    self.outcome.problems.append(
                        f"message: {label}: not one line: {message[:200]!r}"
                    )
            return False, None


def _finite(analysis: Any) -> bool:
    """Logits, probabilities and attention all finite (a ViT's ``attention`` tensor, or the
    list of per-layer maps other kinds' analyses hold as ``attentions``)."""
    import torch

    tensors = [analysis.logits, analysis.probs]
    for name in ("attention", "attentions"):
        value = getattr(analysis, name, None)
        if isinstance(value, torch.Tensor):
            tensors.append(value)
        elif isinstance(value, (list, tuple)):
            tensors += [t for t in value if isinstance(t, torch.Tensor)]
    return all(bool(torch.isfinite(t.float()).all()) for t in tensors)


def run_cli(argv: list[str]) -> tuple[int | None, str, str | None]:
    """vitviz.cli.main(argv) in this process: (exit status, stderr, raw exception or None)."""
    from vitviz import cli

    err, out = io.StringIO(), io.StringIO()
    raw = None
    code: int | None = None
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                code = cli.main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
        except Exception as exc:  # noqa: BLE001 - an uncaught exception is a traceback
            raw = _describe(exc)
    return code, err.getvalue(), raw


def check_cli(outcome: Outcome, label: str, argv: list[str], expected: int, inputs: int) -> None:
    code, err, raw = run_cli(argv)
    if raw is not None:
        category = "memory" if "allocate memory" in raw.lower() else "raw"
        outcome.problems.append(f"{category}: cli {label}: {raw}")
        return
    if "Traceback" in err:
        outcome.problems.append(f"raw: cli {label}: a traceback on stderr")
    lines = [line for line in err.splitlines() if line.strip()]
    ours = [line for line in lines if line.startswith("vitviz-cli: ")]
    progress = [line for line in lines if line.startswith("[") and "] " in line]
    other = [line for line in lines if line not in ours and line not in progress]
    if other:
        outcome.problems.append(
            f"exit: cli {label}: stderr lines not from vitviz-cli: {other[:2]!r}"
        )
    if len(ours) > 3 * inputs:
        outcome.problems.append(f"exit: cli {label}: {len(ours)} error lines")
    if code != expected:
        first = ours[0] if ours else (lines[0] if lines else "")
        outcome.problems.append(
            f"exit: cli {label}: exit {code}, expected {expected} ({first[:160]!r})"
        )
    if expected != 2 and any("nan%" in line.lower() for line in progress):
        outcome.problems.append(f"nonfinite: cli {label}: a NaN prediction was printed")


def _analyze_both(stage: _Stage, run: Callable[[bool], Any]) -> tuple[bool, bool]:
    """analyze without gradients (what the window does first), then, when that worked, with
    them (what the CLI does): (accepted without, accepted with)."""
    results = []
    for gradients in (False, True):
        label = "analyze(gradients=True)" if gradients else "analyze"
        ok, analysis = stage.call(label, lambda g=gradients: run(g))
        if ok and not _finite(analysis):
            stage.outcome.problems.append(f"nonfinite: {label}: non-finite logits or attention")
        results.append(ok)
        if not ok:
            return results[0], False
    return results[0], results[1]


def _api_image(case_path: Path, env: FuzzEnv, stage: _Stage) -> tuple[bool, bool, bool]:
    """(load_image accepted, analysis accepted, analysis with gradients accepted)."""
    import vitviz
    from vitviz.pipeline.analysis import analyze

    loaded_ok, _ = stage.call("load_image", lambda: vitviz.load_image(case_path))
    ok, with_gradients = _analyze_both(stage, lambda g: analyze(env.loaded, case_path, gradients=g))
    return loaded_ok, ok, with_gradients


def _api_checkpoint(case_path: Path, env: FuzzEnv, stage: _Stage) -> tuple[bool, bool, bool]:
    """(load_checkpoint accepted, analysis accepted, analysis with gradients accepted)."""
    from vitviz.checkpoints import load_checkpoint
    from vitviz.pipeline.analysis import analyze

    loaded_ok, loaded = stage.call("load_checkpoint", lambda: load_checkpoint(case_path))
    if not loaded_ok:
        return False, False, False
    stage.loaded = loaded
    ok, with_gradients = _analyze_both(
        stage, lambda g: analyze(loaded, env.control_image, gradients=g)
    )
    return True, ok, with_gradients


def run_case(
    case: Case, folder: Path, env: FuzzEnv, cli: bool = True, batch: bool = False
) -> Outcome:
    """Write ``case`` into ``folder/in`` and run it through the API and (``cli``) the CLI;
    ``batch``: an image also goes through ``explain`` beside a valid image (exit 1 if refused)."""
    outcome = Outcome(case.name, case.kind, case.expect)
    inputs, out = folder / "in", folder / "out"
    inputs.mkdir(parents=True)
    out.mkdir()
    path = case.write(inputs)
    watched = {"case folder": inputs, "temp folder": env.temp, "ghostscript witness": env.witness}
    before = {label: snapshot(p) for label, p in watched.items()}
    stage = _Stage(outcome)
    start = time.perf_counter()
    rss = reset_peak()
    with armed([out, env.cache]) as guard, address_space_limit():
        api = _api_image if case.kind == "image" else _api_checkpoint
        loaded_ok, ok, with_gradients = api(path, env, stage)
        outcome.verdict = "accepted" if ok else "refused"
        if cli:  # the CLI's explain computes the gradient maps too
            _run_cli_stage(case, path, env, out, outcome, loaded_ok, with_gradients, batch)
    outcome.seconds = time.perf_counter() - start
    if case.reference is not None:
        if stage.loaded is not None:
            with address_space_limit():
                check_exact(case, path, stage.loaded, outcome)
        # the loader's last resort words a raw exception: the file's fault went unnamed
        outcome.problems += [
            f"message: unclear: {m[:200]!r}" for m in outcome.messages if BACKSTOP in m
        ]
    peak = peak_kib()
    outcome.peak_growth_mib = max(0, peak - rss) / 1024
    outcome.peak_rss_mib = peak / 1024
    if outcome.peak_growth_mib > MEMORY_LIMIT_MIB:
        outcome.problems.append(
            f"memory: peak RSS grew by {outcome.peak_growth_mib:.0f} MiB "
            f"(limit {MEMORY_LIMIT_MIB} MiB)"
        )
    if case.expect != "either" and outcome.verdict != case.expect:
        said = f" ({outcome.messages[0][:160]!r})" if outcome.messages else ""
        outcome.problems.append(f"verdict: {outcome.verdict}, expected {case.expect}{said}")
    outcome.problems += [f"program: {p}" for p in guard.programs]
    outcome.problems += [f"file: {w}" for w in guard.writes]
    for label, p in watched.items():
        for change in snapshot_diff(before[label], snapshot(p)):
            category = "program" if label == "ghostscript witness" else "file"
            outcome.problems.append(f"{category}: {label}: {change}")
    return outcome


BACKSTOP = "vitviz could not convert these weights ("  # load_checkpoint's catch-all
EXACT_RTOL = 1e-4  # logits: max |ours - theirs| / max |theirs| (DESIGN's rule)


def check_exact(case: Case, path: Path, loaded: Any, outcome: Outcome) -> None:
    """An opened checkpoint runs as the library's model holding the file's tensors (the case's
    ``reference``) on one seeded input at the size vitviz analyses; where that model can't take
    the tensors, opening it was wrong."""
    import torch

    assert case.reference is not None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = case.reference(path)
    except Exception as exc:  # noqa: BLE001 - the library's refusal, in words
        outcome.problems.append(
            f"exact: opened, but the library's model can't take the file: {_describe(exc)}"
        )
        return
    h, w = loaded.preprocessing.image_size
    x = torch.randn(1, 3, h, w, generator=torch.Generator().manual_seed(5))
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs = ref(x)
            theirs = getattr(theirs, "logits", theirs)
            ours = loaded.model(x)
            ours = getattr(ours, "logits", ours)
    except Exception as exc:  # noqa: BLE001
        outcome.problems.append(f"exact: at {h}x{w}: {_describe(exc)}")
        return
    if ours.shape != theirs.shape:
        outcome.problems.append(
            f"exact: logits {tuple(ours.shape)}, the library's {tuple(theirs.shape)}"
        )
        return
    scale = float(theirs.abs().max()) or 1.0
    err = float((ours.double() - theirs.double()).abs().max()) / scale
    if not err <= EXACT_RTOL:
        outcome.problems.append(f"exact: logits differ from the library's by {err:.3g} (rel)")


def _run_cli_stage(
    case: Case,
    path: Path,
    env: FuzzEnv,
    out: Path,
    outcome: Outcome,
    loaded_ok: bool,
    ok: bool,
    batch: bool,
) -> None:
    target = os.fspath(path)
    if case.kind == "image":
        common = ["--checkpoint", str(env.native)]
        check_cli(
            outcome,
            "explain",
            ["explain", target, *common, "--out", str(out / "one")],
            0 if ok else 2,
            1,
        )
        if not batch:
            return
        check_cli(
            outcome,
            "explain batch",
            ["explain", target, str(env.control_image), *common, "--out", str(out / "batch")],
            0 if ok else 1,
            2,
        )
    else:
        check_cli(outcome, "info", ["info", target], 0 if loaded_ok else 2, 1)
        check_cli(
            outcome,
            "explain",
            ["explain", str(env.control_image), "--checkpoint", target, "--out", str(out)],
            0 if ok else 2,
            1,
        )


def warm_up(env: FuzzEnv, folder: Path) -> None:
    """Run a valid image and checkpoint unarmed once so first-use imports happen outside cases."""
    import random

    from hostile_checkpoints import controls
    from hostile_images import valid_controls

    image = valid_controls(random.Random(0), True)[0]
    ckpt = controls(random.Random(0), True)[0]
    for i, case in enumerate((image, ckpt)):
        sub = folder / f"warm-{i}"
        (sub / "in").mkdir(parents=True)
        (sub / "out").mkdir()
        path = case.write(sub / "in")
        if case.kind == "image":
            run_cli(
                ["explain", str(path), "--checkpoint", str(env.native), "--out", str(sub / "out")]
            )
        else:
            run_cli(["info", str(path)])
            run_cli(
                [
                    "explain",
                    str(env.control_image),
                    "--checkpoint",
                    str(path),
                    "--out",
                    str(sub / "out"),
                ]
            )
