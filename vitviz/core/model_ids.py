"""Hugging Face model ids as a user types them: ``org/name`` or ``org/name@revision``.

Plain text rules, no file access and no torch: the window (which must not import torch before
it paints) and the checkpoint loader both decide with these what is an id and what is a path.
"""

from __future__ import annotations

import re

# \Z, not $: "$" also matches before a final newline ("org/name\n" is no id).
_MODEL_ID = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*\Z")
_REVISION = re.compile(r"\A[A-Za-z0-9_.-][A-Za-z0-9_./-]*\Z")
# A name ending so is a file someone meant (a mistyped path), not a repository.
_FILE_SUFFIXES = (".safetensors", ".pth", ".pt", ".bin", ".ckpt", ".json", ".png", ".jpg", ".jpeg")


def looks_like_model_id(text: str) -> bool:
    """``text`` has the shape of a hub model id (``org/name``), not of a file's path."""
    return (
        bool(_MODEL_ID.match(text))
        and ".." not in text
        and not text.lower().endswith(_FILE_SUFFIXES)
    )


def parse_model_ref(text: str) -> tuple[str, str] | None:
    """``org/name`` or ``org/name@revision`` -> (repo id, revision, "main" when none given);
    None when ``text`` is not shaped like one."""
    repo_id, at, revision = str(text).partition("@")
    if not looks_like_model_id(repo_id):
        return None
    if not at:
        return repo_id, "main"
    if not _REVISION.match(revision) or {"", ".", ".."} & set(revision.split("/")):
        return None  # "refs/." would name the refs folder itself, "a//b" an empty part
    return repo_id, revision
