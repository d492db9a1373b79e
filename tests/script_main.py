"""Run a script (a benchmark) as ``__main__`` in this process, as ``python SCRIPT ARGS`` would
from the repository's root, without an interpreter of its own to start (the suite's time):
its exit code and what it wrote to stdout and stderr (its children's inherited output too)."""

from __future__ import annotations

import os
import runpy
import sys
import warnings
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def _code(exc: SystemExit) -> int:
    """The process's exit status ``sys.exit(x)`` would give."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def run_script(
    script: Path,
    *args: str,
    capfd: pytest.CaptureFixture[str],
    env: dict[str, str] | None = None,
    unset: tuple[str, ...] = (),
) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``script`` run with ``args``: every warning an error (as
    ``PYTHONWARNINGS=error``, which its child processes inherit), ``env`` set and ``unset``
    removed for the run; this process's environment, working folder, ``sys.argv``, torch's
    threads and random state are as they were afterwards; the test's captured output keeps what
    the script wrote. An exception the script raises propagates (a traceback: the test
    fails)."""
    threads, rng = torch.get_num_threads(), torch.get_rng_state()
    saved_env = dict(os.environ)
    before = capfd.readouterr()  # not the script's: given back to the capture afterwards
    code = 0
    try:
        with pytest.MonkeyPatch.context() as mp, warnings.catch_warnings():
            mp.chdir(ROOT)
            mp.syspath_prepend(str(script.parent))  # sys.path[0] of ``python SCRIPT``
            mp.setattr(sys, "argv", [str(script), *args])
            for key, value in {"PYTHONWARNINGS": "error", **(env or {})}.items():
                mp.setenv(key, value)
            for key in unset:
                mp.delenv(key, raising=False)
            warnings.simplefilter("error")
            try:
                runpy.run_path(str(script), run_name="__main__")
            except SystemExit as exc:
                code = _code(exc)
    finally:
        os.environ.clear()
        os.environ.update(saved_env)  # what the script itself set, too
        torch.set_num_threads(threads)
        torch.set_rng_state(rng)
        out, err = capfd.readouterr()
        sys.stdout.write(before.out + out)  # the test's captured output: shown if it fails
        sys.stderr.write(before.err + err)
    return code, out, err
