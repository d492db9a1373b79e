"""The memory free on this machine for vitviz's work: ``VITVIZ_MEMORY_BUDGET`` when set (bytes,
or a number with K/M/G/T, e.g. "2G"), else Linux ``MemAvailable`` capped by the cgroup's room.
The analyses' planner (``pipeline.memory``) and the library check's float64 retry
(``checkpoints.library_check``) both read it here."""

from __future__ import annotations

import os
import re
from pathlib import Path

BUDGET_ENV = "VITVIZ_MEMORY_BUDGET"


def parse_bytes(text: str) -> int:
    """'2G', '512M', '1.5g', '1000000' -> bytes (K/M/G/T are powers of 1024)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*", text, re.IGNORECASE)
    if m is None:
        raise ValueError(
            f"{BUDGET_ENV}={text!r} is not a size; use bytes or a number with K, M, G or T"
        )
    scale = 1024 ** " kmgt".index(m.group(2).lower() or " ")
    return int(float(m.group(1)) * scale)


def host_budget() -> int | None:
    """Bytes free in RAM: ``VITVIZ_MEMORY_BUDGET`` when set, else ``host_available()``."""
    budget = os.environ.get(BUDGET_ENV)
    return parse_bytes(budget) if budget else host_available()


def host_available() -> int | None:
    """Free RAM: Linux MemAvailable, capped by the cgroup's limit; sysconf elsewhere."""
    found = _meminfo_available()
    if found is None:
        try:
            found = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, ValueError, OSError):
            return None
    limit = _cgroup_room()
    return min(found, limit) if limit is not None else found


def _meminfo_available() -> int | None:
    try:
        text = Path("/proc/meminfo").read_text()
    except OSError:
        return None
    m = re.search(r"^MemAvailable:\s+(\d+)\s*kB", text, re.MULTILINE)
    return int(m.group(1)) * 1024 if m else None


def _cgroup_room() -> int | None:
    """limit − usage of this process's cgroup (v2, then v1), None when unlimited or unknown."""
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        (
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            "/sys/fs/cgroup/memory/memory.usage_in_bytes",
        ),
    ):
        try:
            limit_text = Path(limit_file).read_text().strip()
            usage = int(Path(usage_file).read_text().strip())
        except (OSError, ValueError):
            continue
        if not limit_text.isdigit() or int(limit_text) >= 2**60:
            return None  # "max" or the v1 "no limit" value
        return max(0, int(limit_text) - usage)
    return None
