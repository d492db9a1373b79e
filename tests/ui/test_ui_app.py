"""``main()`` as a user starts it: ``python -m vitviz IMAGE CHECKPOINT`` in a subprocess,
offscreen and on a real X server (Xvfb)."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]


def app_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of a child app: its own settings folder, timing printed."""
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config"), "VITVIZ_TIMING": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def test_main_offscreen_opens_files_and_quits(tmp_path: Path, tiny_ckpt: Path, photo_files):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "vitviz",
            str(photo_files["chelsea"]),
            str(tiny_ckpt),
            "--quit-after-ms",
            "200",
        ],
        cwd=tmp_path,
        env=app_env(tmp_path, QT_QPA_PLATFORM="offscreen"),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    report = f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert proc.returncode == 0, report
    assert "Traceback" not in proc.stderr, report
    assert "Error" not in proc.stderr, report
    lines = dict(line.split()[:2] for line in proc.stdout.splitlines() if line.startswith("first-"))
    assert set(lines) == {"first-paint", "first-prediction"}, report
    assert 0 < float(lines["first-paint"]) < float(lines["first-prediction"])
    paint = next(line for line in proc.stdout.splitlines() if line.startswith("first-paint"))
    assert paint.endswith("(torch not loaded)"), "the window must paint before torch loads"
    # settings were written to the private folder on close
    assert list((tmp_path / "config").rglob("*.conf")), report


def test_main_help_is_plain() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "vitviz", "--help"],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0 and "--quit-after-ms" in proc.stdout


def test_installed_pyside_keeps_references_to_none_and_bools() -> None:
    """PySide6 6.12.0 under Python < 3.12 drops a reference to None on every void Qt call, so
    the app aborts after ~65k calls (pyproject excludes it); this fails on any such build."""
    code = (
        "import sys\n"
        "from PySide6.QtCore import QObject\n"
        "o = QObject()\n"
        "refs = lambda: (sys.getrefcount(None), sys.getrefcount(True), sys.getrefcount(False))\n"
        "before = refs()\n"
        "for _ in range(10_000):\n"
        "    o.setObjectName('')\n"
        "    o.blockSignals(False)\n"
        "    o.signalsBlocked()\n"
        "after = refs()\n"
        "print([b - a for b, a in zip(before, after)])\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lost = ast.literal_eval(proc.stdout.strip())  # three ints printed by the child
    assert all(abs(n) < 100 for n in lost), (
        f"references lost per 10k calls (None, True, False): {lost}"
    )


# -- a real X server ------------------------------------------------------------------------------
def start_xvfb() -> tuple[subprocess.Popen, str]:
    """Xvfb on a display it picks itself (-displayfd), 1600 × 1000 × 24."""
    xvfb = shutil.which("Xvfb")
    if xvfb is None:
        pytest.fail(
            "Xvfb is not on PATH: this test needs a real X server. Install it "
            "(apt-get install xvfb x11-utils xdotool; .ci/run does) and run again."
        )
    read, write = os.pipe()
    proc = subprocess.Popen(
        [xvfb, "-displayfd", str(write), "-screen", "0", "1600x1000x24", "-nolisten", "tcp"],
        pass_fds=(write,),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(write)
    with os.fdopen(read) as f:
        number = f.readline().strip()
    if not number:
        proc.kill()
        pytest.fail("Xvfb started but did not report its display number")
    return proc, f":{number}"


def find_window(display: str, name: str) -> tuple[int, int, int, int] | None:
    """(x, y, width, height) of the largest mapped top-level window whose title holds ``name``."""
    env = {**os.environ, "DISPLAY": display}
    tool = shutil.which("xwininfo")
    if tool is None:
        pytest.fail("xwininfo is not on PATH (package x11-utils); .ci/run installs it")
    out = subprocess.run(
        [tool, "-root", "-tree"], env=env, capture_output=True, text=True, check=False
    ).stdout
    best = None
    for line in out.splitlines():
        if f'"{name}' not in line:
            continue
        # e.g.:  0x600001 "vitviz — tiny.safetensors": ("vitviz" "vitviz")  1400x900+0+0  +0+0
        geometry = next((tok for tok in line.split() if "x" in tok and tok.count("+") == 2), None)
        if geometry is None:
            continue
        size, _, _ = geometry.partition("+")
        w, h = (int(v) for v in size.split("x"))
        x, y = (int(v) for v in line.split()[-1].lstrip("+").split("+"))
        if best is None or w * h > best[2] * best[3]:
            best = (x, y, w, h)
    return best


@pytest.mark.xvfb
def test_real_window_on_xvfb(tmp_path: Path, tiny_ckpt: Path, photo_files) -> None:
    from PIL import ImageGrab

    xvfb, display = start_xvfb()
    app = None
    try:
        env = app_env(tmp_path, DISPLAY=display, QT_QPA_PLATFORM="xcb")
        env.pop("WAYLAND_DISPLAY", None)
        app = subprocess.Popen(
            [sys.executable, "-m", "vitviz", str(photo_files["chelsea"]), str(tiny_ckpt)],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        seen: list[str] = []
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and app.poll() is None:
            line = app.stdout.readline()
            seen.append(line)
            if line.startswith("first-prediction"):
                break
        assert app.poll() is None, f"the app exited: {app.communicate(timeout=10)}"
        assert any(s.startswith("first-prediction") for s in seen), seen

        box = None
        while time.monotonic() < deadline and box is None:
            box = find_window(display, "vitviz")
            time.sleep(0.2)
        assert box is not None, "no window titled vitviz… on the X server"
        x, y, w, h = box
        assert w >= 600 and h >= 400, box
        shot = np.asarray(ImageGrab.grab(xdisplay=display).convert("RGB"))
        region = shot[y : y + h, x : x + w]
        assert region.shape[:2] == (h, w)
        assert region.std() > 20, "the window looks blank"
        assert len(np.unique(region.reshape(-1, 3), axis=0)) > 500, "too few colours for the maps"
        assert app.poll() is None, "the app died while being looked at"
    finally:
        if app is not None:
            app.terminate()
            try:
                app.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                app.kill()
                app.communicate()
        xvfb.terminate()
        xvfb.wait(timeout=10)
