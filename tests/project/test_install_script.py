"""packaging/install.sh's flags, run against a stand-in .venv/bin/python that records what pip is
asked for (no network, nothing installed): --cpu takes the +cpu pair from PyTorch's CPU index,
--families and --test pick the extras and combine, a working pair is kept, a CUDA build is
replaced only when --cpu asks, and a CPU index that can't be reached is named in one line."""

from __future__ import annotations

import os
import platform
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"

# $1 "-": the script's torch check, read from stdin; it exits as FAKE_TORCH says (0: a working
# pair, 1: none, 2: a CUDA build when --cpu is asked, else 0). "-m pip": logged, and fails for a
# torch install when FAKE_PIP_FAILS is set. Anything else (vitviz.qt_deps): nothing to say.
FAKE_PYTHON = """#!/usr/bin/env bash
if [[ "$1" == "-" ]]; then
    cat > /dev/null
    state="${FAKE_TORCH:-0}"
    if [[ "$state" == 2 && "$2" != 1 ]]; then state=0; fi
    exit "$state"
fi
if [[ "$1 $2" == "-m pip" ]]; then
    echo "${*:3}" >> "$PIP_LOG"
    if [[ -n "${FAKE_PIP_FAILS:-}" && "$*" == *torch==* ]]; then exit 1; fi
fi
exit 0
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the install script beside a .venv whose python is the stand-in."""
    (tmp_path / "packaging").mkdir()
    shutil.copy(REPO / "packaging" / "install.sh", tmp_path / "packaging" / "install.sh")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(FAKE_PYTHON)
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    return tmp_path


def install(project: Path, *flags: str, **env: str) -> tuple[subprocess.CompletedProcess, list]:
    log = project / "pip.log"
    log.unlink(missing_ok=True)
    full = {**os.environ, "PIP_LOG": str(log), **env}
    full.pop("VITVIZ_TORCH_CPU_INDEX", None)
    proc = subprocess.run(
        ["bash", str(project / "packaging" / "install.sh"), *flags],
        capture_output=True, text=True, env=full, timeout=60, check=False,
    )  # fmt: skip
    calls = log.read_text().splitlines() if log.is_file() else []
    return proc, [call.split() for call in calls]


LINUX = platform.system() == "Linux"  # elsewhere (macOS) PyPI's wheels are the CPU builds


def pair(cpu: bool) -> list[str]:
    """The torch install's arguments: where from and the pinned pair."""
    x86 = platform.machine() in ("x86_64", "AMD64")
    torch, vision = ("2.14.1", "0.29.1") if x86 else ("2.9.1", "0.24.1")
    if cpu and LINUX:
        local = "+cpu" if x86 else ""  # the CPU index's x86-64 versions say "+cpu"
        return ["--index-url", CPU_INDEX, f"torch=={torch}{local}", f"torchvision=={vision}{local}"]
    return [f"torch=={torch}", f"torchvision=={vision}"]


QUIET = ["install", "--quiet", "--disable-pip-version-check"]


def test_the_default_installs_pypis_pair_and_the_app(project: Path) -> None:
    proc, calls = install(project, FAKE_TORCH="1")
    assert proc.returncode == 0, proc.stderr
    assert calls == [[*QUIET, *pair(cpu=False)], [*QUIET, "-e", "."]]


def test_cpu_takes_the_cpu_pair_from_pytorchs_index(project: Path) -> None:
    proc, calls = install(project, "--cpu", "--families", "--test", FAKE_TORCH="1")
    assert proc.returncode == 0, proc.stderr
    assert calls == [[*QUIET, *pair(cpu=True)], [*QUIET, "-e", ".[families,test]"]]
    assert (f"from {CPU_INDEX}" in proc.stderr) == LINUX


def test_a_working_pair_is_kept_and_a_cuda_one_replaced_only_for_cpu(project: Path) -> None:
    proc, calls = install(project, "--families", FAKE_TORCH="2")
    assert proc.returncode == 0 and calls == [[*QUIET, "-e", ".[families]"]]
    proc, calls = install(project, "--test", FAKE_TORCH="0")
    assert proc.returncode == 0 and calls == [[*QUIET, "-e", ".[test]"]]
    proc, calls = install(project, "--cpu", FAKE_TORCH="2")
    assert proc.returncode == 0 and calls[0] == [*QUIET, *pair(cpu=True)]
    assert "rm -rf .venv && bash packaging/install.sh --cpu" in proc.stderr


def test_an_unreachable_cpu_index_is_named_and_nothing_else_runs(project: Path) -> None:
    proc, calls = install(project, "--cpu", FAKE_TORCH="1", FAKE_PIP_FAILS="1")
    assert proc.returncode == 1
    assert len(calls) == 1  # the app is not installed over a missing torch
    last = proc.stderr.strip().splitlines()[-1]
    named = CPU_INDEX in last and "VITVIZ_TORCH_CPU_INDEX" in last and "without --cpu" in last
    assert named == LINUX, last  # elsewhere no CPU index was asked: pip's own error stands


def test_an_unknown_flag_is_refused_with_the_flags_listed(project: Path) -> None:
    proc, calls = install(project, "--gpu")
    assert proc.returncode == 2 and calls == []
    assert "unknown option --gpu" in proc.stderr
    for flag in ("--cpu", "--families", "--test", "--check-qt"):
        assert flag in proc.stderr
