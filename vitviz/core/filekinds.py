"""What a path a user gives us is: an image, a checkpoint, a folder of either, or unknown.

Decided by suffix and, for unknown suffixes, by the file's first bytes; nothing is decoded, and
only regular files are read (a FIFO or device is "unknown" without being opened).
Importing this module does not import torch.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from vitviz.core.image_formats import IMAGE_EXTENSIONS, sniff_format

CHECKPOINT_SUFFIXES = frozenset({".safetensors", ".pth", ".pt", ".bin", ".ckpt"})
_CHECKPOINT_MAGIC = (b"PK\x03\x04", b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05")


def file_kind(path: str | Path) -> str:
    """'image', 'checkpoint', 'image_folder', 'checkpoint_folder', 'missing' or 'unknown'."""
    p = Path(path)
    try:
        mode = os.stat(p).st_mode
    except OSError:
        return "missing"
    if stat.S_ISDIR(mode):
        if (p / "config.json").is_file():
            return "checkpoint_folder"
        return "image_folder"
    suffix = p.suffix.lower()
    if suffix in CHECKPOINT_SUFFIXES:
        return "checkpoint"
    if suffix in IMAGE_EXTENSIONS:
        return "image"  # the loader checks the content (and refuses a FIFO) with a message
    if not stat.S_ISREG(mode):
        return "unknown"
    try:  # non-blocking: a file swapped for a FIFO since the check can't hang the window
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
        with open(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return "unknown"
            head = f.read(64) or b""
    except OSError:
        return "unknown"
    found = sniff_format(head)
    if found is not None and found[1]:
        return "image"
    if head.startswith(_CHECKPOINT_MAGIC) or (len(head) > 8 and head[8:9] == b"{"):
        return "checkpoint"
    return "unknown"
