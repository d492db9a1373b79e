"""Does Qt's X11 window-system plugin (xcb) find the system libraries it needs? No Qt here.

On a fresh Linux desktop Qt aborts (signal 6) when a library of its xcb plugin is missing, and
its message may name another one. This module asks ``ldd`` which libraries of PySide6's
``libqxcb.so`` are not found and turns their names into the exact install command (apt, and
dnf/pacman where the names are known). ``packaging/install.sh`` runs it after installing
(``python -m vitviz.qt_deps``: exit 1 when something is missing), and ``vitviz`` runs it before
it creates the window, so a missing library gets this advice instead of an abort.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

PLUGIN = Path("Qt", "plugins", "platforms", "libqxcb.so")

# soname -> (Debian/Ubuntu apt, Fedora dnf, Arch pacman) package names
PACKAGES: dict[str, tuple[str, str, str]] = {
    "libxcb-cursor.so.0": ("libxcb-cursor0", "xcb-util-cursor", "xcb-util-cursor"),
    "libxcb-icccm.so.4": ("libxcb-icccm4", "xcb-util-wm", "xcb-util-wm"),
    "libxcb-util.so.1": ("libxcb-util1", "xcb-util", "xcb-util"),
    "libxcb-image.so.0": ("libxcb-image0", "xcb-util-image", "xcb-util-image"),
    "libxcb-keysyms.so.1": ("libxcb-keysyms1", "xcb-util-keysyms", "xcb-util-keysyms"),
    "libxcb-render-util.so.0": (
        "libxcb-render-util0",
        "xcb-util-renderutil",
        "xcb-util-renderutil",
    ),
    "libxcb-randr.so.0": ("libxcb-randr0", "libxcb", "libxcb"),
    "libxcb-shm.so.0": ("libxcb-shm0", "libxcb", "libxcb"),
    "libxcb-sync.so.1": ("libxcb-sync1", "libxcb", "libxcb"),
    "libxcb-xfixes.so.0": ("libxcb-xfixes0", "libxcb", "libxcb"),
    "libxcb-render.so.0": ("libxcb-render0", "libxcb", "libxcb"),
    "libxcb-shape.so.0": ("libxcb-shape0", "libxcb", "libxcb"),
    "libxcb-xkb.so.1": ("libxcb-xkb1", "libxcb", "libxcb"),
    "libxcb-xinerama.so.0": ("libxcb-xinerama0", "libxcb", "libxcb"),
    "libxcb-xinput.so.0": ("libxcb-xinput0", "libxcb", "libxcb"),
    "libxcb-glx.so.0": ("libxcb-glx0", "libxcb", "libxcb"),
    "libxcb.so.1": ("libxcb1", "libxcb", "libxcb"),
    "libxkbcommon.so.0": ("libxkbcommon0", "libxkbcommon", "libxkbcommon"),
    "libxkbcommon-x11.so.0": ("libxkbcommon-x11-0", "libxkbcommon-x11", "libxkbcommon-x11"),
    "libX11-xcb.so.1": ("libx11-xcb1", "libX11-xcb", "libx11"),
    "libX11.so.6": ("libx11-6", "libX11", "libx11"),
    "libXau.so.6": ("libxau6", "libXau", "libxau"),
    "libXdmcp.so.6": ("libxdmcp6", "libXdmcp", "libxdmcp"),
    "libSM.so.6": ("libsm6", "libSM", "libsm"),
    "libICE.so.6": ("libice6", "libICE", "libice"),
    "libGL.so.1": ("libgl1", "libglvnd-glx", "libglvnd"),
    "libGLX.so.0": ("libglx0", "libglvnd-glx", "libglvnd"),
    "libGLdispatch.so.0": ("libglvnd0", "libglvnd", "libglvnd"),
    "libEGL.so.1": ("libegl1", "libglvnd-egl", "libglvnd"),
    "libOpenGL.so.0": ("libopengl0", "libglvnd-opengl", "libglvnd"),
    "libfontconfig.so.1": ("libfontconfig1", "fontconfig", "fontconfig"),
    "libfreetype.so.6": ("libfreetype6", "freetype", "freetype2"),
    "libdbus-1.so.3": ("libdbus-1-3", "dbus-libs", "dbus"),
    "libglib-2.0.so.0": ("libglib2.0-0", "glib2", "glib2"),
    "libgthread-2.0.so.0": ("libglib2.0-0", "glib2", "glib2"),
    "libpng16.so.16": ("libpng16-16", "libpng", "libpng"),
    "libz.so.1": ("zlib1g", "zlib", "zlib"),
    "libexpat.so.1": ("libexpat1", "expat", "expat"),
    "libstdc++.so.6": ("libstdc++6", "libstdc++", "gcc-libs"),
}

# Libraries that come inside the PySide6 wheel, not from the system.
BUNDLED = ("libQt6", "libicu", "libpyside6", "libshiboken6")


NO_DISPLAY = (
    "vitviz: no display to open the window on (DISPLAY and WAYLAND_DISPLAY are not set): "
    "connect with `ssh -X`, check the installation with "
    "`QT_QPA_PLATFORM=offscreen vitviz --self-test`, or use `vitviz-cli` for headless work."
)


@dataclass(frozen=True)
class Advice:
    text: str  # what is wrong and the way out (the commands that install what is missing)
    fatal: bool  # True: Qt would abort on the xcb plugin; don't start it
    exit_code: int = 1  # the app's exit status when fatal (2: no display)


def xcb_plugin() -> Path | None:
    """PySide6's xcb platform plugin (found without importing PySide6), or None."""
    spec = importlib.util.find_spec("PySide6")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = Path(folder) / PLUGIN
        if path.is_file():
            return path
    return None


def run_ldd(path: Path) -> str | None:
    """``ldd path``'s output, or None when ldd can't be run."""
    try:
        proc = subprocess.run(
            ["ldd", str(path)], capture_output=True, text=True, timeout=20, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout


def not_found(ldd_text: str) -> list[str]:
    """The sonames ``ldd`` reports as ``name => not found``, each once, in its order."""
    names = []
    for line in ldd_text.splitlines():
        name, arrow, where = line.strip().partition("=>")
        if arrow and where.strip() == "not found" and name.strip() not in names:
            names.append(name.strip())
    return names


def find_missing(
    plugin: Path | None = None, ldd: Callable[[Path], str | None] = run_ldd
) -> list[str] | None:
    """The xcb plugin's libraries that are missing ([] when none), or None when it can't be
    told (no PySide6 plugin, no ldd)."""
    path = plugin if plugin is not None else xcb_plugin()
    if path is None:
        return None
    text = ldd(path)
    return None if text is None else not_found(text)


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def advice_text(missing: Sequence[str]) -> str:
    """What is missing and the commands that install it (apt; dnf and pacman where known)."""
    known = [PACKAGES[name] for name in missing if name in PACKAGES]
    unknown = [name for name in missing if name not in PACKAGES]
    lines = [
        "vitviz: Qt's X11 window plugin (xcb) can't start: these system libraries are missing: "
        + ", ".join(missing)
    ]
    if known:
        apt, dnf, pacman = (_unique(p[i] for p in known) for i in range(3))
        lines += [
            "Install them with (Debian, Ubuntu):",
            f"  sudo apt-get install {' '.join(apt)}",
            f"(Fedora: sudo dnf install {' '.join(dnf)}; Arch: sudo pacman -S {' '.join(pacman)})",
        ]
    for name in unknown:
        if name.startswith(BUNDLED):
            lines.append(f"{name} comes with PySide6: reinstall it (bash packaging/install.sh).")
        else:
            lines.append(f"No package is known here for {name}: search your distribution's.")
    if not getattr(sys, "frozen", False):
        lines.append(f"Check again with: {sys.executable} -m vitviz.qt_deps")
    lines.append("(vitviz-cli, the command line, needs none of these.)")
    return "\n".join(lines)


def uses_xcb(env: Mapping[str, str], platform: str = sys.platform) -> bool:
    """Whether Qt would load the xcb plugin: Linux (or another X11 Unix) without a
    QT_QPA_PLATFORM naming another platform."""
    if platform in ("darwin", "win32", "cygwin"):
        return False
    chosen = env.get("QT_QPA_PLATFORM", "").strip()
    return not chosen or chosen.startswith("xcb")


def has_display(env: Mapping[str, str]) -> bool:
    """Whether Qt's default platform finds a display: an X server (DISPLAY) or, unless xcb is
    asked for by name, a Wayland compositor (WAYLAND_DISPLAY)."""
    if env.get("DISPLAY", "").strip():
        return True
    xcb_chosen = bool(env.get("QT_QPA_PLATFORM", "").strip())  # uses_xcb: it names xcb
    return not xcb_chosen and bool(env.get("WAYLAND_DISPLAY", "").strip())


def startup_check(
    env: Mapping[str, str] = os.environ,
    platform: str = sys.platform,
    find: Callable[[], list[str] | None] = find_missing,
) -> Advice | None:
    """The advice to print before the window is created, or None when all is well (or can't be
    told, or Qt won't use xcb). No display at all: one line and exit status 2 (Qt would abort
    with a message about a missing library). A missing library: fatal unless a Wayland session
    may let Qt use its own plugin."""
    if not uses_xcb(env, platform):
        return None
    if not has_display(env):
        return Advice(NO_DISPLAY, fatal=True, exit_code=2)
    missing = find()
    if not missing:
        return None
    wayland = bool(env.get("WAYLAND_DISPLAY")) and not env.get("QT_QPA_PLATFORM")
    return Advice(advice_text(missing), fatal=not wayland)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m vitviz.qt_deps``: 0 when the xcb plugin finds its libraries (or it can't be
    told, said on stderr), 1 with the install command when some are missing."""
    del argv
    if sys.platform in ("darwin", "win32", "cygwin"):
        return 0  # Qt uses its own platform plugins there
    missing = find_missing()
    if missing is None:
        print(
            "vitviz: could not check Qt's xcb plugin (no PySide6 plugin or no ldd)", file=sys.stderr
        )
        return 0
    if missing:
        print(advice_text(missing), file=sys.stderr)
        return 1
    print("vitviz: Qt's X11 window plugin finds every system library it needs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
