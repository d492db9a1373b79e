"""What a path a user gives us is: an image, a checkpoint, a folder of either, or unknown.

Decided by suffix and, for unknown suffixes, by the file's first bytes; nothing is decoded.
Importing this module does not import torch.
"""

from __future__ import annotations

from pathlib import Path

from vitviz.imaging.loading import IMAGE_EXTENSIONS

CHECKPOINT_SUFFIXES = frozenset({".safetensors", ".pth", ".pt", ".bin", ".ckpt"})
_IMAGE_MAGIC = (b"\x89PNG", b"\xff\xd8\xff", b"GIF8", b"BM", b"II*\x00", b"MM\x00*", b"RIFF")
_CHECKPOINT_MAGIC = (b"PK\x03\x04", b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05")


def file_kind(path: str | Path) -> str:
    """'image', 'checkpoint', 'image_folder', 'checkpoint_folder', 'missing' or 'unknown'."""
    p = Path(path)
    if not p.exists():
        return "missing"
    if p.is_dir():
        if (p / "config.json").is_file():
            return "checkpoint_folder"
        return "image_folder"
    suffix = p.suffix.lower()
    if suffix in CHECKPOINT_SUFFIXES:
        return "checkpoint"
    if suffix in IMAGE_EXTENSIONS:
        return "image"
    try:
        with open(p, "rb") as f:
            head = f.read(16)
    except OSError:
        return "unknown"
    if head.startswith(_IMAGE_MAGIC):
        return "image"
    if head.startswith(_CHECKPOINT_MAGIC) or (len(head) > 8 and head[8:9] == b"{"):
        return "checkpoint"
    return "unknown"
