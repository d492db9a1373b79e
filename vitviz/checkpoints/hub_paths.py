"""Hugging Face cache references: a repository folder or a model id, to its snapshot folder.

The hub cache keeps a model as ``models--<org>--<name>/`` with ``refs/main`` (the commit hash of
the snapshot last fetched) and ``snapshots/<hash>/`` (the files). ``load_checkpoint`` accepts:

- the snapshot folder itself (a model folder like any other);
- the repository folder: ``refs/main`` is followed to its snapshot (the only snapshot when there
  is no ``refs/main``);
- a model id such as ``timm/vit_small_patch16_224.augreg_in21k_ft_in1k`` or
  ``facebook/dinov2-small`` that is not a path on this disk, looked up in the cache
  (``HF_HUB_CACHE``, else ``HF_HOME/hub``, else ``~/.cache/huggingface/hub``).

Nothing is downloaded. ``refs/main`` is read as text and must be a commit hash: a file that says
anything else is refused, so a crafted ref can't point outside the repository folder.
"""

from __future__ import annotations

import re
from pathlib import Path

from vitviz.checkpoints.cache import hf_hub_cache
from vitviz.checkpoints.errors import CheckpointError

_MODEL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
_REVISION = re.compile(r"^[0-9a-f]{7,64}$")
_REF_MAX_BYTES = 256


def is_repository_folder(path: Path) -> bool:
    """``path`` is a hub cache repository folder (``models--org--name`` with snapshots)."""
    return path.name.startswith("models--") and (path / "snapshots").is_dir()


def repository_id(folder: Path) -> str:
    """``models--org--name`` -> ``org/name``."""
    return "/".join(folder.name.split("--")[1:])


def snapshot_of(folder: Path) -> Path:
    """The snapshot folder ``refs/main`` of repository folder ``folder`` names (its only
    snapshot when it has no ``refs/main``). CheckpointError when none can be chosen."""
    name = repository_id(folder)
    snapshots = folder / "snapshots"
    ref = folder / "refs" / "main"
    if ref.is_file():
        if ref.stat().st_size > _REF_MAX_BYTES:
            raise CheckpointError(f"{name}: its refs/main is not a commit hash.")
        revision = ref.read_text(encoding="utf-8", errors="replace").strip()
        if not _REVISION.match(revision):
            raise CheckpointError(f"{name}: its refs/main is not a commit hash.")
        snap = snapshots / revision
        if not snap.is_dir():
            raise CheckpointError(
                f"{name}: refs/main names snapshot {revision[:7]}, which is not in the cache "
                f"({folder}); open one of its snapshots/ folders instead."
            )
        return snap
    found = sorted(p for p in snapshots.iterdir() if p.is_dir())
    if len(found) == 1:
        return found[0]
    if not found:
        raise CheckpointError(f"{name}: the cache holds no snapshot of it ({folder}).")
    raise CheckpointError(
        f"{name}: the cache holds {len(found)} snapshots and no refs/main to choose one; "
        f"open one of {folder / 'snapshots'}/… instead."
    )


def looks_like_model_id(text: str) -> bool:
    """``text`` has the shape of a hub model id (``org/name``)."""
    return bool(_MODEL_ID.match(text)) and ".." not in text


def resolve_hub_reference(path: str | Path) -> Path:
    """The folder or file to open for ``path``: a repository folder's snapshot, a cached model
    id's snapshot, else ``path`` itself. CheckpointError naming the id and the cache when a
    model id is not in it."""
    p = Path(path)
    if p.is_dir() and is_repository_folder(p):
        return snapshot_of(p)
    if p.exists() or not looks_like_model_id(str(path)):
        return p
    org, name = str(path).split("/")
    cache = hf_hub_cache()
    folder = cache / f"models--{org}--{name}"
    if not folder.is_dir():
        raise CheckpointError(
            f"{path} is neither a file nor a model in the Hugging Face cache ({cache}); "
            "vitviz downloads nothing: fetch it with timm, transformers or huggingface-cli, "
            "or give its folder."
        )
    return snapshot_of(folder)
