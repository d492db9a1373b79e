"""A model id from the Hugging Face Hub into the standard cache, as timm and transformers fetch
it (DESIGN §3): ``org/name`` or ``org/name@revision``.

- **Cached**: the snapshot the cache reader (``hub_paths``) resolves opens with no network.
- **Offline** (``HF_HUB_OFFLINE=1`` or ``offline=True``): nothing else; an id not in the cache is
  refused in one line.
- **Else**: the repository's file listing (``huggingface_hub``'s ``model_info`` with sizes) says
  which files vitviz reads (``hub_files``) and how many bytes they are before anything is
  fetched; each file goes to ``blobs/<etag>.incomplete`` (resumed with an HTTP range when a
  cancelled or broken download left one), is checked against its size and hash, becomes
  ``blobs/<etag>``, and is linked from ``snapshots/<commit>/``; ``refs/<revision>`` is written
  last. So nothing half-written is ever named by a snapshot or a ref, and timm, transformers
  and open_clip find the files where they look (and vitviz finds what they downloaded).

``HF_HOME``, ``HF_HUB_CACHE``, ``HF_ENDPOINT``, ``HF_TOKEN`` and ``HF_HUB_OFFLINE`` are read when
called. Every fault (no network, a 404, a gated or private repository, a broken connection, a
full disk) is a CheckpointError of one line naming the id and what to do.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.folders import WEIGHT_FILES
from vitviz.checkpoints.hub_files import (
    FileChoice,
    RepoFile,
    choose_files,
    code_refusal,
    needs_code,
)
from vitviz.checkpoints.hub_paths import (
    COMMIT_HASH,
    cached_snapshot,
    hf_hub_cache,
    is_repository_folder,
    parse_model_ref,
    repository_folder,
    snapshot_of,
)
from vitviz.core.printable import byte_size

DEFAULT_ENDPOINT = "https://huggingface.co"
_TRUE = {"1", "ON", "YES", "TRUE"}
_DISK_MARGIN = 16 * 2**20  # bytes left free beyond the download
_HASH_CHUNK = 4 * 2**20
_TIMEOUT = 30.0  # seconds without a byte before a connection counts as broken
_RETRIES = 5  # broken connections in a row, with no byte between them, before giving up
_RETRY_PAUSE = 0.5  # seconds
_LOCK_WAIT = 0.5  # seconds between two looks at a cancel while another writer holds a blob
_ETAG = re.compile(r"[0-9a-fA-F]{40}|[0-9a-fA-F]{64}")

Progress = Callable[[int, int], None]  # (bytes done, bytes in all)
Cancelled = Callable[[], bool]


class DownloadCancelledError(Exception):
    """The user cancelled; what was fetched stays, and the next download resumes from it."""


@dataclass(frozen=True)
class HubSettings:
    """Where models come from and go, read from the environment when asked."""

    endpoint: str
    cache: Path
    offline: bool
    offline_why: str  # "--offline" or "HF_HUB_OFFLINE=1"


def hub_settings(offline: bool | None = None) -> HubSettings:
    """``HF_ENDPOINT``, the cache (``HF_HUB_CACHE`` / ``HF_HOME``), and offline: ``offline``
    when given True, else ``HF_HUB_OFFLINE``."""
    env_offline = os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in _TRUE
    endpoint = (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
    why = "--offline" if offline else "HF_HUB_OFFLINE=1"
    return HubSettings(endpoint, hf_hub_cache(), bool(offline) or env_offline, why)


@dataclass(frozen=True)
class DownloadPlan:
    """What a download of ``repo_id@revision`` fetches: known before any byte of it is."""

    repo_id: str
    revision: str
    commit: str
    choice: FileChoice
    settings: HubSettings

    @property
    def shown(self) -> str:
        return self.repo_id if self.revision == "main" else f"{self.repo_id}@{self.revision}"

    @property
    def folder(self) -> Path:
        return repository_folder(self.repo_id, self.settings.cache)

    @property
    def snapshot(self) -> Path:
        return self.folder / "snapshots" / self.commit

    @property
    def target(self) -> Path:
        """What opens once it is fetched: the snapshot folder, or its lone weights file."""
        name = self.choice.open_name
        return self.snapshot if name is None else self.snapshot / name

    def have_bytes(self) -> int:
        """Bytes of the plan already on this disk (whole blobs, and partial ones)."""
        have = 0
        for f in self.choice.files:
            blob = self.folder / "blobs" / f.etag
            if (self.snapshot / f.name).exists() or blob.is_file():
                have += f.size
            elif (part := _partial(blob)).is_file():
                have += min(part.stat().st_size, f.size)
        return have


# -- the cache ---------------------------------------------------------------------------------
def cached_target(repo_id: str, revision: str = "main", cache: Path | None = None) -> Path | None:
    """What opens for ``repo_id@revision`` from the cache alone: its snapshot when it holds
    config.json and weights, else its lone weights file; None when the cache has neither."""
    try:
        snap = cached_snapshot(repo_id, revision, cache)
    except CheckpointError:
        return None
    return _openable(snap)


def _openable(snap: Path) -> Path | None:
    if (snap / "config.json").is_file():
        return snap if any((snap / n).is_file() for n in WEIGHT_FILES) else None
    local = [RepoFile(p.name, 0, "") for p in snap.iterdir() if p.is_file()]
    try:
        name = choose_files(snap.name, local).open_name
    except CheckpointError:
        return None
    return None if name is None else snap / name


def resolve_reference(
    path: str | Path,
    *,
    offline: bool | None = None,
    progress: Progress | None = None,
    cancelled: Cancelled | None = None,
    before: Callable[[DownloadPlan], None] | None = None,
) -> Path:
    """The file or folder to open for ``path``: a path on this disk as it is (a cache
    repository folder: its snapshot), a cached model id's snapshot, else the id downloaded
    (``before(plan)`` is told its size first). CheckpointError (one line) otherwise."""
    p = Path(path)
    if p.is_dir() and is_repository_folder(p):
        return snapshot_of(p)
    if p.exists():
        return p
    ref = parse_model_ref(str(path))
    if ref is None:
        return p  # not a model id: the loader says what is wrong with the path
    settings = hub_settings(offline)
    found = cached_target(*ref, cache=settings.cache)
    if found is not None:
        return found
    if settings.offline:
        raise offline_refusal(*ref, settings)
    plan = plan_download(*ref, settings=settings)
    if before is not None:
        before(plan)
    return fetch(plan, progress=progress, cancelled=cancelled)


def offline_refusal(repo_id: str, revision: str, settings: HubSettings) -> CheckpointError:
    shown = repo_id if revision == "main" else f"{repo_id}@{revision}"
    return CheckpointError(
        f"{shown} is not in the Hugging Face cache ({settings.cache}) and "
        f"{settings.offline_why} forbids downloading it: run once without "
        f"{settings.offline_why.split('=')[0]}, or give a folder of its files."
    )


# -- the hub -----------------------------------------------------------------------------------
def plan_download(
    repo_id: str, revision: str = "main", *, settings: HubSettings | None = None
) -> DownloadPlan:
    """The files of ``repo_id@revision`` vitviz reads and their sizes, from the hub's listing;
    CheckpointError (one line) for every fault and for a repository vitviz can't open."""
    settings = settings or hub_settings()
    shown = repo_id if revision == "main" else f"{repo_id}@{revision}"
    if settings.offline:
        raise offline_refusal(repo_id, revision, settings)
    from huggingface_hub import HfApi

    try:
        info = HfApi(endpoint=settings.endpoint).model_info(
            repo_id, revision=revision, files_metadata=True
        )
    except Exception as exc:
        if _malformed(exc):
            raise CheckpointError(
                f"{shown}: {settings.endpoint} did not answer as a hub does (no model listing "
                "came): is HF_ENDPOINT a hub, or does this network want a sign-in page first?"
            ) from exc
        raise hub_fault(shown, exc, settings) from exc
    commit = str(info.sha or "")
    if not COMMIT_HASH.match(commit):
        raise CheckpointError(
            f"{shown}: {settings.endpoint} answered without a commit hash: is HF_ENDPOINT a hub?"
        )
    if COMMIT_HASH.match(revision) and commit != revision:
        raise CheckpointError(
            f"{shown}: {settings.endpoint} answered with commit {commit[:12]}, not the one "
            "asked for: is HF_ENDPOINT a hub?"
        )
    if needs_code(info.config if isinstance(info.config, dict) else None, info.tags or ()):
        raise code_refusal(shown)
    listing = []
    for s in info.siblings or ():
        lfs = s.lfs
        size = lfs.size if lfs is not None else s.size
        etag = lfs.sha256 if lfs is not None else s.blob_id
        if not isinstance(size, int) or size < 0 or not etag or not isinstance(s.rfilename, str):
            continue  # a listing without sizes: the file can't be planned, so it isn't chosen
        listing.append(RepoFile(s.rfilename, size, str(etag)))
    choice = choose_files(shown, listing, info.tags or ())
    for f in choice.files:
        if not _safe_etag(f.etag):
            raise CheckpointError(
                f"{shown}: {settings.endpoint} lists {f.name} without a hash vitviz can check "
                f"({f.etag[:24]!r}): is HF_ENDPOINT a hub?"
            )
    return DownloadPlan(repo_id, revision, commit, choice, settings)


def _malformed(exc: BaseException) -> bool:
    """A listing request answered with something that is no listing (a sign-in page's HTML,
    JSON of another shape), not an HTTP error of the hub."""
    from huggingface_hub import errors

    wrong = (ValueError, TypeError, KeyError, AttributeError)
    return isinstance(exc, wrong) and not isinstance(exc, errors.HfHubHTTPError)


def hub_fault(shown: str, exc: BaseException, settings: HubSettings) -> CheckpointError:
    """One line for a failed request: which id, what went wrong, what to do."""
    from huggingface_hub import errors

    http = _http()
    hub = settings.endpoint
    if isinstance(exc, errors.GatedRepoError):
        return CheckpointError(
            f"{shown} is gated: accept its terms at {hub}/{shown.split('@')[0]} and set HF_TOKEN "
            "to a token of that account."
        )
    if isinstance(exc, errors.RepositoryNotFoundError):
        return CheckpointError(
            f"{shown} is neither a path here nor a model on {hub} (or it is private): check the "
            "path or the id, or set HF_TOKEN to a token that can read it."
        )
    if isinstance(exc, errors.RevisionNotFoundError):
        return CheckpointError(f"{shown}: {hub} has no such revision: check the part after @.")
    if isinstance(exc, errors.RemoteEntryNotFoundError):
        return CheckpointError(f"{shown}: {hub} lists a file it can't serve (404); try later.")
    if isinstance(exc, errors.OfflineModeIsEnabled):
        return CheckpointError(
            f"{shown} is not in the Hugging Face cache ({settings.cache}) and HF_HUB_OFFLINE "
            "forbids downloading it."
        )
    if isinstance(exc, errors.HfHubHTTPError):
        status = getattr(exc.response, "status_code", "?")
        return CheckpointError(f"{shown}: {hub} answered HTTP {status}; try again later.")
    if isinstance(exc, (http.ConnectError, http.TimeoutException)):
        return CheckpointError(
            f"{shown} can't be downloaded: no connection to {hub}. Connect (or set HF_ENDPOINT "
            "to a mirror) and try again; once cached it opens offline."
        )
    if isinstance(exc, _broken()):
        return CheckpointError(
            f"{shown}: the connection to {hub} broke ({type(exc).__name__}); run it again and "
            "the download resumes where it stopped."
        )
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return CheckpointError(
            f"{shown}: the disk of {settings.cache} is full; free some space and run it again "
            "(the download resumes)."
        )
    if isinstance(exc, OSError):
        return CheckpointError(f"{shown} can't be downloaded: {exc.strerror or exc}.")
    raise exc  # a bug, not a fault of the network or the hub: let it show as one


# -- fetching ----------------------------------------------------------------------------------
def fetch(
    plan: DownloadPlan, *, progress: Progress | None = None, cancelled: Cancelled | None = None
) -> Path:
    """Fetch the plan's files into the cache (module docstring) and return what opens.
    DownloadCancelledError when ``cancelled()`` says so (fetched bytes stay for the next call)."""
    blobs = plan.folder / "blobs"
    counter = _Counter(plan.have_bytes(), plan.choice.total, progress, cancelled)
    _check_disk(plan, plan.choice.total - counter.done)
    try:
        blobs.mkdir(parents=True, exist_ok=True)
        for f in plan.choice.files:
            counter.check()
            blob = blobs / f.etag
            if not (plan.snapshot / f.name).exists() and not blob.is_file():
                with _blob_lock(plan, f, counter):  # one writer per blob, huggingface_hub's too
                    if not blob.is_file():
                        _transfer(plan, f, blob, counter)
            if f.name == "config.json":
                _refuse_code(plan, blob if blob.is_file() else plan.snapshot / f.name)
        # The weights file that makes the snapshot openable (``_openable``) is linked last, so
        # links that stop half-way (a full disk while copying) leave nothing the next open trusts.
        for f in sorted(plan.choice.files, key=lambda f: f.name in WEIGHT_FILES):
            _link(plan.snapshot / f.name, blobs / f.etag)
        if plan.revision != plan.commit:
            _write_ref(plan.folder / "refs" / plan.revision, plan.commit)
    except (CheckpointError, DownloadCancelledError):
        raise
    except Exception as exc:
        raise hub_fault(plan.shown, exc, plan.settings) from exc
    counter.report()
    return plan.target


@contextlib.contextmanager
def _blob_lock(plan: DownloadPlan, f: RepoFile, counter: _Counter) -> Iterator[None]:
    """Hold the lock ``huggingface_hub`` takes for this blob (``.locks/<repo>/<etag>.lock``),
    so that vitviz, timm or transformers in another process never write it at once; waiting
    for it, a cancel is still heard."""
    from filelock import Timeout
    from huggingface_hub.utils import WeakFileLock

    path = plan.settings.cache / ".locks" / plan.folder.name / f"{f.etag}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        while True:
            counter.check()
            try:
                stack.enter_context(WeakFileLock(path, timeout=_LOCK_WAIT))
                break
            except Timeout:
                continue
        yield


def _transfer(plan: DownloadPlan, f: RepoFile, blob: Path, counter: _Counter) -> None:
    """``f`` into ``blob`` by way of ``blob.incomplete`` (resumed when there is one), checked."""
    from huggingface_hub import hf_hub_url

    part = _partial(blob)
    url = hf_hub_url(plan.repo_id, f.name, revision=plan.commit, endpoint=plan.settings.endpoint)
    with open(part, "ab") as out:
        if out.tell() > f.size:  # not a prefix of this file: start again
            counter.add(-f.size)
            out.seek(0)
            out.truncate()
        tries = 0
        while out.tell() < f.size:
            before = out.tell()
            try:
                _get_from(url, out, f.size, counter)
            except _broken() as exc:
                tries = 0 if out.tell() > before else tries + 1
                if tries >= _RETRIES:
                    raise exc
                time.sleep(_RETRY_PAUSE)
                continue
            break  # the answer ended whole: all the server has (asking again would loop)
    if not _matches(part, f):
        part.unlink(missing_ok=True)
        counter.add(-f.size)
        raise CheckpointError(
            f"{plan.shown}: {f.name} arrived damaged (its size or hash is not the hub's); it "
            "was deleted: run it again."
        )
    os.replace(part, blob)


def _http() -> Any:
    """The HTTP client module huggingface_hub uses (httpx2; httpx in its 1.x releases)."""
    try:
        import httpx2

        return httpx2
    except ImportError:  # pragma: no cover - an older huggingface_hub
        import httpx

        return httpx


def _broken() -> tuple[type[BaseException], ...]:
    http = _http()
    return (http.TransportError, http.StreamError)


def _get_from(url: str, out: BinaryIO, size: int, counter: _Counter) -> None:
    """GET the rest of ``url`` after the ``out.tell()`` bytes ``out`` holds (a range request),
    appending it to ``out`` chunk by chunk, each counted before it is written."""
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    have = out.tell()
    headers = build_hf_headers()
    headers["Accept-Encoding"] = "identity"
    if have:
        headers["Range"] = f"bytes={have}-"
    with get_session().stream("GET", url, headers=headers, timeout=_TIMEOUT) as response:
        hf_raise_for_status(response)
        if have and response.status_code == 200:  # the range was ignored: the whole file
            counter.add(-have)
            out.seek(0)
            out.truncate()
        for chunk in response.iter_bytes():  # as it arrives: a broken connection loses none
            if out.tell() + len(chunk) > size:
                raise CheckpointError(f"{url} sent more than the {size} bytes listed.")
            counter.add(len(chunk))  # a cancel raises here: the file stays a prefix
            out.write(chunk)


def _matches(path: Path, f: RepoFile) -> bool:
    """``path`` is ``f``: its size, and its hash when the etag is one (LFS: sha256 of the
    bytes; git: sha1 of the blob header and the bytes)."""
    if path.stat().st_size != f.size:
        return False
    etag = f.etag.lower()
    if len(etag) == 64:
        digest = hashlib.sha256()
    else:  # 40: a plan holds no other (_safe_etag)
        digest = hashlib.sha1(f"blob {f.size}\0".encode(), usedforsecurity=False)
    with open(path, "rb") as src:
        while chunk := src.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest() == etag


def _refuse_code(plan: DownloadPlan, config: Path) -> None:
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # the loader names a damaged config.json
    if isinstance(data, dict) and needs_code(data):
        raise code_refusal(plan.shown)


def _link(pointer: Path, blob: Path) -> None:
    if pointer.exists():
        return
    pointer.parent.mkdir(parents=True, exist_ok=True)
    if pointer.is_symlink():
        pointer.unlink()  # a link to a blob that is gone
    try:
        pointer.symlink_to(os.path.relpath(blob, pointer.parent))
    except OSError:  # no symlinks here (Windows without developer mode): a copy, as the hub's
        from vitviz.checkpoints.atomic import atomic_path

        with atomic_path(pointer) as tmp:  # whole or not at all: a half copy is never named
            shutil.copyfile(blob, tmp)


def _write_ref(ref: Path, commit: str) -> None:
    from vitviz.checkpoints.atomic import atomic_path

    with atomic_path(ref) as tmp:
        tmp.write_text(commit, encoding="utf-8")


def _check_disk(plan: DownloadPlan, missing: int) -> None:
    place = plan.settings.cache
    while not place.exists() and place != place.parent:
        place = place.parent
    try:
        free = shutil.disk_usage(place).free
    except OSError:
        return
    if missing + _DISK_MARGIN > free:
        raise CheckpointError(
            f"{plan.shown} needs {byte_size(missing)} and {place} has "
            f"{byte_size(free)} free: free some space (or set HF_HOME to another disk) and "
            "try again."
        )


def _partial(blob: Path) -> Path:
    return blob.with_name(blob.name + ".incomplete")


def _safe_etag(etag: str) -> bool:
    """A git blob id (40 hex digits) or an LFS sha256 (64): the blob's file name, and a hash
    ``_matches`` checks (anything else would name a file that is trusted unchecked)."""
    return bool(_ETAG.fullmatch(etag))


class _Counter:
    """Bytes done of all, told to ``progress``; DownloadCancelledError once ``cancelled()``."""

    def __init__(
        self, done: int, total: int, progress: Progress | None, cancelled: Cancelled | None
    ) -> None:
        self.done, self.total = done, total
        self.progress, self.cancelled = progress, cancelled
        self.report()

    def check(self) -> None:
        if self.cancelled is not None and self.cancelled():
            raise DownloadCancelledError

    def add(self, n: int) -> None:
        self.check()  # before the chunk is written: the partial file stays a prefix
        self.done = max(0, min(self.total, self.done + n))
        self.report()

    def report(self) -> None:
        if self.progress is not None:
            self.progress(self.done, self.total)
