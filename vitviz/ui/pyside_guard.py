"""Guard against a reference-count bug of some PySide6 builds on Python < 3.12.

PySide6 6.12.0's abi3 wheels return ``None`` from every void C++ method without taking a
reference to it. From Python 3.12 on ``None`` is immortal and nothing happens; on 3.10 and 3.11
each such call (``widget.update()``, ``painter.setPen()``, ``processEvents()``, ...) drops one
reference, and after some tens of thousands of calls the interpreter aborts with "Fatal Python
error: none_dealloc: deallocating None". ``guard()`` detects the bug with a probe and, only
then, gives ``None`` an effectively endless reference count: what 3.12 does for every
interpreter.
"""

from __future__ import annotations

import sys

PROBE_CALLS = 64
_applied = False


def none_lost_per_void_call() -> float:
    """References to None lost per call of a void Qt method (0 on a sound build)."""
    from PySide6.QtCore import QObject

    probe = QObject()
    before = sys.getrefcount(None)
    for _ in range(PROBE_CALLS):
        probe.setObjectName("")
    return (before - sys.getrefcount(None)) / PROBE_CALLS


def guard() -> bool:
    """Apply the workaround where the bug is present; True if it is (or was) applied."""
    global _applied
    if _applied:
        return True
    if sys.version_info >= (3, 12) or sys.implementation.name != "cpython":
        return False  # None is immortal there
    if none_lost_per_void_call() < 0.5:
        return False
    import ctypes

    # ob_refcnt is the first field of every CPython object (Py_ssize_t).
    ctypes.c_ssize_t.from_address(id(None)).value += 1 << 40
    _applied = True
    return True
