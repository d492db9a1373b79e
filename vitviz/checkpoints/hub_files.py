"""Which files of a hub repository vitviz downloads: only those it reads (DESIGN §3).

From the repository's file listing (names, sizes, blob ids): the config, the image processor's
settings and the tokenizer (for a model that takes prompts), and one copy of the weights,
safetensors when the repository has them, else ``.bin`` / ``.pth`` (read with
``weights_only``). Never code: a repository whose model needs its own code
(``trust_remote_code``: an ``auto_map`` in its config, the hub's ``custom_code`` tag) is refused.
No network here: the listing comes in, the choice goes out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from vitviz.checkpoints.errors import CheckpointError

# Read beside the weights of a model folder (checkpoints.folders, kinds.clip's tokenizers).
SETTINGS_FILES = ("config.json", "preprocessor_config.json", "processor_config.json")
TOKENIZER_FILES = ("tokenizer.json",)
TOKENIZER_FALLBACK = ("vocab.json", "merges.txt")  # OpenAI CLIP's, when no tokenizer.json
# A config.json folder's weights, best first: (the file, the shards an index names).
FOLDER_WEIGHTS = (
    ("model.safetensors", None),
    ("model.safetensors.index.json", re.compile(r"model-\d+-of-\d+\.safetensors")),
    ("pytorch_model.bin", None),
    ("pytorch_model.bin.index.json", re.compile(r"pytorch_model-\d+-of-\d+\.bin")),
)
# A repository without config.json (an OpenCLIP or a bare state dict): its one weights file.
LONE_SAFE = (".safetensors",)
LONE_PICKLE = (".bin", ".pth", ".pt")
# The lone weights an OpenCLIP repository names, tried before any other lone file.
NAMED_LONE_WEIGHTS = ("open_clip_model.safetensors", "open_clip_pytorch_model.bin")
# Characters no listed name may hold: separators (``/`` and Windows' ``\\`` and ``:``), the
# rest of what Windows forbids, NUL and every control character (a newline included).
_NOT_IN_NAMES = frozenset('/\\:<>"|?*') | frozenset(map(chr, [*range(32), 127]))


def plain_file_name(name: object) -> bool:
    """``name`` is one file name directly in a folder on every system: no separator, no
    control character, not ``.`` or ``..``, no trailing dot or space (Windows drops them).
    A hub's listing names outside this are never chosen, so a hostile listing can't write
    outside the snapshot folder (DESIGN §3)."""
    return (
        isinstance(name, str)
        and 0 < len(name) <= 255
        and name not in (".", "..")
        and not name.endswith((".", " "))
        and not any(c in _NOT_IN_NAMES for c in name)
    )


@dataclass(frozen=True)
class RepoFile:
    """One file of a repository as its listing states it."""

    name: str
    size: int  # bytes
    etag: str  # the blob's name in the cache: its LFS sha256, else its git blob id


@dataclass(frozen=True)
class FileChoice:
    """What to download of one repository, and what of it to open."""

    files: tuple[RepoFile, ...]  # settings first, the weights last
    open_name: str | None  # None: the snapshot folder; else this weights file in it

    @property
    def total(self) -> int:
        return sum(f.size for f in self.files)


def needs_code(config: Mapping[str, Any] | None, tags: Iterable[str] = ()) -> bool:
    """The model runs code of its own (transformers' ``auto_map``, the hub's ``custom_code``)."""
    return "custom_code" in set(tags) or bool(config and config.get("auto_map"))


def code_refusal(repo_id: str) -> CheckpointError:
    return CheckpointError(
        f"{repo_id} needs its own Python code to build (trust_remote_code), which vitviz never "
        "runs: choose a repository of a supported family (Help ▸ Supported checkpoints)."
    )


def choose_files(repo_id: str, listing: Iterable[RepoFile], tags: Iterable[str] = ()) -> FileChoice:
    """The files of ``listing`` vitviz reads (module docstring). CheckpointError naming
    ``repo_id`` when it holds code, no weights vitviz reads, or several it can't choose from."""
    if needs_code(None, tags):
        raise code_refusal(repo_id)
    top = {f.name: f for f in listing if plain_file_name(f.name)}  # a subfolder's: not read
    if "config.json" in top:
        weights = _folder_weights(top)
        if weights:
            settings = [top[n] for n in SETTINGS_FILES if n in top]
            settings += _tokenizer(top)
            return FileChoice(tuple(settings + weights), None)
    lone = _lone_weights(repo_id, top)
    return FileChoice((lone,), lone.name)


def _folder_weights(top: Mapping[str, RepoFile]) -> list[RepoFile]:
    for name, shards in FOLDER_WEIGHTS:
        if name in top:
            parts = [] if shards is None else [top[n] for n in sorted(top) if shards.fullmatch(n)]
            return [top[name], *parts]
    return []


def _tokenizer(top: Mapping[str, RepoFile]) -> list[RepoFile]:
    if all(n in top for n in TOKENIZER_FILES):
        return [top[n] for n in TOKENIZER_FILES]
    if all(n in top for n in TOKENIZER_FALLBACK):
        return [top[n] for n in TOKENIZER_FALLBACK]
    return []


def _lone_weights(repo_id: str, top: Mapping[str, RepoFile]) -> RepoFile:
    for name in NAMED_LONE_WEIGHTS:
        if name in top:
            return top[name]
    for suffixes in (LONE_SAFE, LONE_PICKLE):
        found = [f for n, f in sorted(top.items()) if n.lower().endswith(suffixes)]
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            names = ", ".join(f.name for f in found[:4])
            raise CheckpointError(
                f"{repo_id} holds several weights files ({names}) and no config.json to say "
                "which is the model: download the one you want (hf download "
                f"{repo_id} FILE) and open that file."
            )
    raise CheckpointError(
        f"{repo_id} holds no weights vitviz reads (config.json with model.safetensors or "
        "pytorch_model.bin, or one .safetensors / .pth / .bin file)."
    )
