"""The window's system libraries: a missing library of Qt's xcb plugin gets the exact install
command from the install script and from the app (instead of Qt's abort), with ldd faked."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from vitviz.qt_deps import (
    NO_DISPLAY,
    PACKAGES,
    advice_text,
    find_missing,
    not_found,
    startup_check,
)

REPO = Path(__file__).resolve().parents[2]

LDD_OUTPUT = """\tlinux-vdso.so.1 (0x00007ffc6d1f2000)
\tlibxcb-cursor.so.0 => /lib/x86_64-linux-gnu/libxcb-cursor.so.0 (0x00007f5b3b51c000)
\tlibxcb-icccm.so.4 => not found
\tlibxcb-keysyms.so.1 => not found
\tlibxcb-shape.so.0 => not found
\tlibxcb-xkb.so.1 => not found
\tlibxcb.so.1 => /lib/x86_64-linux-gnu/libxcb.so.1 (0x00007f5b3a16e000)
"""
MISSING = ["libxcb-icccm.so.4", "libxcb-keysyms.so.1", "libxcb-shape.so.0", "libxcb-xkb.so.1"]
APT_LINE = "sudo apt-get install libxcb-icccm4 libxcb-keysyms1 libxcb-shape0 libxcb-xkb1"


def test_ldd_output_gives_the_missing_libraries_in_order() -> None:
    assert not_found(LDD_OUTPUT) == MISSING
    assert not_found(LDD_OUTPUT.replace("not found", "/lib/x.so (0x1)")) == []


def test_advice_names_the_packages_for_apt_dnf_and_pacman() -> None:
    text = advice_text([*MISSING, "libweird.so.3"])
    lines = text.splitlines()
    assert all(name in lines[0] for name in MISSING)
    assert f"  {APT_LINE}" in lines
    # the xcb extensions all come from one Fedora / Arch package, named once
    assert "sudo dnf install xcb-util-wm xcb-util-keysyms libxcb;" in text
    assert "sudo pacman -S xcb-util-wm xcb-util-keysyms libxcb)" in text
    assert any("libweird.so.3" in line and "No package" in line for line in lines)
    pyside = advice_text(["libQt6XcbQpa.so.6"])
    assert "apt-get" not in pyside and "comes with PySide6: reinstall it" in pyside
    assert {PACKAGES[name][0] for name in MISSING} == set(APT_LINE.split()[3:])


def test_the_app_stops_with_the_advice_only_where_qt_would_abort() -> None:
    missing = lambda: list(MISSING)  # noqa: E731
    advice = startup_check({"DISPLAY": ":0"}, "linux", missing)
    assert advice is not None and advice.fatal and APT_LINE in advice.text
    assert startup_check({"DISPLAY": ":0", "QT_QPA_PLATFORM": "xcb"}, "linux", missing).fatal
    assert startup_check({"QT_QPA_PLATFORM": "offscreen"}, "linux", missing) is None
    assert startup_check({}, "darwin", missing) is None
    wayland = startup_check({"WAYLAND_DISPLAY": "wayland-0"}, "linux", missing)
    assert wayland is not None and not wayland.fatal  # Qt may use its Wayland plugin: warn
    assert startup_check({"DISPLAY": ":0"}, "linux", lambda: []) is None
    assert startup_check({"DISPLAY": ":0"}, "linux", lambda: None) is None  # can't tell: try


def run_module(module: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``python -m module`` run in a child with ``env``."""
    return subprocess.run(
        [sys.executable, "-m", module],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_no_display_is_said_before_the_libraries_are_checked() -> None:
    missing = lambda: list(MISSING)  # noqa: E731
    for env in ({}, {"QT_QPA_PLATFORM": "xcb"}, {"QT_QPA_PLATFORM": "xcb", "WAYLAND_DISPLAY": "w"}):
        advice = startup_check(env, "linux", missing)
        assert advice is not None and advice.fatal and advice.exit_code == 2, env
        assert advice.text == NO_DISPLAY and "libxcb" not in advice.text
    assert startup_check({"WAYLAND_DISPLAY": "wayland-0"}, "linux", lambda: []) is None
    assert startup_check({"QT_QPA_PLATFORM": "offscreen"}, "linux", missing) is None
    assert (
        startup_check({}, "darwin", missing) is None and startup_check({}, "win32", missing) is None
    )


def test_the_app_without_a_display_says_so_in_one_line_and_exits_2(tmp_path: Path) -> None:
    """An ssh session without X forwarding: one line naming the ways out, exit status 2, not
    Qt's abort (134) after a message about libxcb-cursor0."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")
    }
    env.update(HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / "config"))
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    proc = run_module("vitviz.app", env)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines == [NO_DISPLAY], proc.stderr
    for way_out in ("ssh -X", "QT_QPA_PLATFORM=offscreen vitviz --self-test", "vitviz-cli"):
        assert way_out in lines[0]
    assert "no display" in lines[0] and proc.stdout == ""
    assert not (tmp_path / "config").exists()  # no settings were written


@pytest.fixture
def fake_ldd(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An ``ldd`` first on PATH that reports MISSING as not found and records its argument."""
    bin_dir, called = tmp_path / "bin", tmp_path / "ldd-called-with"
    bin_dir.mkdir()
    script = bin_dir / "ldd"
    script.write_text(f"#!/bin/sh\necho \"$1\" > '{called}'\ncat <<'EOF'\n{LDD_OUTPUT}EOF\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    env = {k: v for k, v in os.environ.items() if k not in ("QT_QPA_PLATFORM", "WAYLAND_DISPLAY")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    return env, called


def test_the_check_command_prints_the_install_line(
    fake_ldd: tuple[dict[str, str], Path],
) -> None:
    env, called = fake_ldd
    proc = run_module("vitviz.qt_deps", env)
    assert proc.returncode == 1
    assert APT_LINE in proc.stderr.splitlines()[2]
    assert called.read_text().strip().endswith("Qt/plugins/platforms/libqxcb.so")


def test_the_install_script_prints_the_install_line_and_goes_on(
    fake_ldd: tuple[dict[str, str], Path],
) -> None:
    env, called = fake_ldd
    proc = subprocess.run(
        ["bash", str(REPO / "packaging" / "install.sh"), "--check-qt"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr  # advice, never a failed installation
    assert f"  {APT_LINE}" in proc.stderr.splitlines()
    assert called.is_file()


def test_the_app_prints_the_advice_instead_of_aborting(
    fake_ldd: tuple[dict[str, str], Path], tmp_path: Path
) -> None:
    env, _ = fake_ldd
    env.update(DISPLAY=":917", HOME=str(tmp_path))  # no X server there: Qt would abort
    proc = run_module("vitviz.app", env)
    assert proc.returncode == 1, proc.stderr
    assert f"  {APT_LINE}" in proc.stderr.splitlines()
    assert "Traceback" not in proc.stderr


def test_the_installed_pyside6_plugin_is_the_one_checked() -> None:
    seen: list[Path] = []

    def ldd(path: Path) -> str:
        seen.append(path)
        return LDD_OUTPUT

    assert find_missing(ldd=ldd) == MISSING
    assert seen[0].is_file() and seen[0].parts[-4:] == ("Qt", "plugins", "platforms", "libqxcb.so")
    assert find_missing(ldd=lambda _path: None) is None  # no ldd: can't tell


def test_the_install_doc_lists_packages_the_advice_knows() -> None:
    text = (REPO / "docs" / "install.md").read_text()
    flat = " ".join(text.split())  # the Fedora and Arch commands wrap over lines
    for i, command in enumerate(("sudo apt-get install ", "sudo dnf install ", "sudo pacman -S ")):
        start = flat.index(command) + len(command)
        listed = flat[start:].split("`")[0].split()
        assert len(listed) >= 9
        assert set(listed) <= {p[i] for p in PACKAGES.values()}, command
    # CI installs at least the libraries the install doc lists
    ci = (REPO / ".ci" / "run").read_text()
    apt = flat[flat.index("sudo apt-get install ") :].split("`")[0].split()[3:]
    assert all(f" {name}" in " ".join(ci.split()) for name in apt)
