"""Hugging Face cache references: a repository folder or a model id, to its snapshot folder.

The one reader of the hub cache, for the window's "Open from cache" and for every model id the
CLI, the window and ``load_checkpoint`` are given. The cache keeps a model as
``models--<org>--<name>/`` with ``refs/<revision>`` (a text file naming the snapshot last
fetched for that branch or tag) and ``snapshots/<name>/`` (the files). A reference resolves as
``huggingface_hub`` resolves it offline (DESIGN §3): a 40-character commit hash names its
snapshot folder; any other revision is looked up in ``refs/`` and the ref's text, whatever it
is (a commit hash, or a mirror's or a hand-made cache's own name), names the snapshot folder.
With no ``refs/main`` the repository's only snapshot is taken.

- the snapshot folder itself is a model folder like any other;
- the repository folder: its ``refs/main`` snapshot;
- a model id such as ``timm/vit_small_patch16_224.augreg_in21k_ft_in1k`` or
  ``facebook/dinov2-small`` (optionally ``@revision``) that is not a path on this disk, looked
  up in the cache (``HF_HUB_CACHE``, else ``HF_HOME/hub``, else ``~/.cache/huggingface/hub``).

A ref's text must name a folder directly inside ``snapshots/``: one that says ``../x`` or holds
a separator is refused, so a crafted ref can't point outside the repository folder.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from vitviz.checkpoints.errors import CheckpointError
from vitviz.core.model_ids import looks_like_model_id, parse_model_ref  # noqa: F401 (re-exported)

COMMIT_HASH = re.compile(r"\A[0-9a-f]{40}\Z")  # \Z: "$" would let a final newline by
_REF_MAX_BYTES = 256


def cache_home() -> Path:
    """``XDG_CACHE_HOME``, else ``~/.cache``."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) if xdg else Path.home() / ".cache"


def hf_hub_cache() -> Path:
    """The Hugging Face hub cache: ``HF_HUB_CACHE``, else ``HF_HOME/hub``, else
    ``<cache home>/huggingface/hub`` (read when called: the variables may change)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]) / "hub"
    return cache_home() / "huggingface" / "hub"


def is_repository_folder(path: Path) -> bool:
    """``path`` is a hub cache repository folder (``models--org--name`` with snapshots)."""
    return path.name.startswith("models--") and (path / "snapshots").is_dir()


def repository_id(folder: Path) -> str:
    """``models--org--name`` -> ``org/name``."""
    return "/".join(folder.name.split("--")[1:])


def repository_folder(repo_id: str, cache: Path | None = None) -> Path:
    """Where the cache keeps ``org/name``: ``<cache>/models--org--name``."""
    return (cache or hf_hub_cache()) / ("models--" + repo_id.replace("/", "--"))


def _snapshot_name(text: str) -> str | None:
    """A ref's text as a folder name inside ``snapshots/``, or None when it can't be one."""
    name = text.strip()
    if not name or name in (".", "..") or any(c in name for c in "/\\\0"):
        return None
    return name


def read_ref(folder: Path, revision: str = "main") -> str | None:
    """The snapshot name ``refs/<revision>`` of repository folder ``folder`` holds (None when
    there is no such ref). CheckpointError when its text can't name a snapshot folder."""
    ref = folder / "refs" / revision
    if not ref.is_file():
        return None
    text = ""
    if ref.stat().st_size <= _REF_MAX_BYTES:
        text = ref.read_text(encoding="utf-8", errors="replace")
    name = _snapshot_name(text)
    if name is None:
        raise CheckpointError(
            f"{repository_id(folder)}: its refs/{revision} names no snapshot folder "
            f"({text.strip()[:40]!r}); open one of its snapshots/ folders instead."
        )
    return name


def snapshot_of(folder: Path, revision: str = "main") -> Path:
    """The snapshot folder ``revision`` of repository folder ``folder`` names: a commit hash's
    own, else the one ``refs/<revision>`` names (the only snapshot when there is no
    ``refs/main``). CheckpointError when none can be chosen."""
    name = repository_id(folder)
    snapshots = folder / "snapshots"
    wanted = revision if COMMIT_HASH.match(revision) else read_ref(folder, revision)
    if wanted is None and revision != "main" and (snapshots / revision).is_dir():
        wanted = revision  # a snapshot folder named as the revision (a short hash, a tag)
    if wanted is not None:
        snap = snapshots / wanted
        if not snap.is_dir():
            raise CheckpointError(
                f"{name}: revision {revision} names snapshot {wanted[:12]}, which is not in the "
                f"cache ({folder}); open one of its snapshots/ folders instead."
            )
        return snap
    if revision != "main":
        raise CheckpointError(f"{name}@{revision} is not in the Hugging Face cache ({folder}).")
    found = sorted(p for p in snapshots.iterdir() if p.is_dir()) if snapshots.is_dir() else []
    if len(found) == 1:
        return found[0]
    if not found:
        raise CheckpointError(f"{name}: the cache holds no snapshot of it ({folder}).")
    raise CheckpointError(
        f"{name}: the cache holds {len(found)} snapshots and no refs/main to choose one; "
        f"open one of {folder / 'snapshots'}/… instead."
    )


def model_ref_of(path: str | Path) -> tuple[str, str] | None:
    """(repo id, revision) when ``path`` is a model reference rather than a path on this disk."""
    if Path(path).exists():
        return None
    return parse_model_ref(str(path))


def cached_snapshot(repo_id: str, revision: str = "main", cache: Path | None = None) -> Path:
    """The snapshot of ``repo_id@revision`` in the cache. CheckpointError naming the id and the
    cache when it is not there."""
    folder = repository_folder(repo_id, cache)
    if not folder.is_dir():
        shown = repo_id if revision == "main" else f"{repo_id}@{revision}"
        raise CheckpointError(
            f"{shown} is neither a file nor a model in the Hugging Face cache ({folder.parent})."
        )
    return snapshot_of(folder, revision)


def resolve_hub_reference(path: str | Path) -> Path:
    """The folder or file to open for ``path``: a repository folder's snapshot, a cached model
    id's snapshot, else ``path`` itself. CheckpointError naming the id and the cache when a
    model id is not in it."""
    p = Path(path)
    if p.is_dir() and is_repository_folder(p):
        return snapshot_of(p)
    ref = model_ref_of(path)
    if ref is None:
        return p
    return cached_snapshot(*ref)
