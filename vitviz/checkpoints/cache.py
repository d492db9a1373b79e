""" "Open from cache": checkpoints already on this disk in the Hugging Face hub cache and the torch
hub cache. Only what is there is listed; nothing is downloaded and no weights are read.

- Hugging Face: ``HF_HUB_CACHE``, else ``HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub``
  (``~/.cache/huggingface/hub``): of each ``models--org--name``, the snapshot its model id opens
  (``hub_paths.snapshot_of``, the reader the CLI uses too), when it holds config.json and
  weights; every snapshot when that reader can't choose one.
- torch hub: ``TORCH_HOME/hub``, else ``$XDG_CACHE_HOME/torch/hub`` (``~/.cache/torch/hub``):
  ``checkpoints/*.pth`` (and .pt / .safetensors).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.folders import WEIGHT_FILES
from vitviz.checkpoints.hub_paths import cache_home, hf_hub_cache, snapshot_of

_TORCH_SUFFIXES = (".pth", ".pt", ".safetensors", ".bin")
# Family guesses from a name, most specific first.
_GUESSES = (
    ("dinov2", "dinov2"),
    ("dino", "dino"),
    ("deit", "deit"),
    ("vit_b_", "torchvision"),
    ("vit_l_", "torchvision"),
    ("vit_h_", "torchvision"),
    ("vit", "vit"),
)


@dataclass(frozen=True)
class CacheEntry:
    """One cached checkpoint: what to show, where it is, how big, and a guess at its family."""

    label: str  # e.g. "google/vit-base-patch16-224 (Hugging Face, 1a2b3c4)"
    path: Path  # a snapshot folder or a checkpoint file; load_checkpoint opens either
    size: int  # bytes on disk (weights included)
    family: str  # guessed from the name: "dinov2", "dino", "deit", "torchvision", "vit", "unknown"
    source: str  # "huggingface" | "torch"


def torch_hub_dir() -> Path:
    if os.environ.get("TORCH_HOME"):
        return Path(os.environ["TORCH_HOME"]) / "hub"
    return cache_home() / "torch" / "hub"


def guess_family(name: str) -> str:
    lowered = name.lower()
    return next((family for key, family in _GUESSES if key in lowered), "unknown")


def _size(path: Path) -> int:
    try:
        if path.is_file():
            return path.stat().st_size
        return sum(p.stat().st_size for p in path.iterdir() if p.is_file())
    except OSError:
        return 0


def _hf_snapshots(repo: Path) -> list[Path]:
    """The snapshot a model id of ``repo`` opens (the one reader, ``hub_paths.snapshot_of``);
    every snapshot when that reader can't choose one (several, and no refs/main)."""
    try:
        return [snapshot_of(repo)]
    except CheckpointError:
        snapshots = repo / "snapshots"
        return sorted(p for p in snapshots.iterdir() if p.is_dir()) if snapshots.is_dir() else []


def _hf_entries(root: Path) -> list[CacheEntry]:
    entries = []
    for repo in sorted(root.glob("models--*")):
        repo_id = "/".join(repo.name.split("--")[1:])
        for snap in _hf_snapshots(repo):
            if not (snap / "config.json").is_file():
                continue
            if not any((snap / name).is_file() for name in WEIGHT_FILES):
                continue
            entries.append(
                CacheEntry(
                    f"{repo_id} (Hugging Face, {snap.name[:7]})",
                    snap,
                    _size(snap),
                    guess_family(repo_id),
                    "huggingface",
                )
            )
    return entries


def _torch_entries(root: Path) -> list[CacheEntry]:
    folder = root / "checkpoints"
    files = (
        sorted(p for p in folder.glob("*") if p.suffix.lower() in _TORCH_SUFFIXES and p.is_file())
        if folder.is_dir()
        else []
    )
    return [
        CacheEntry(f"{p.name} (torch hub)", p, _size(p), guess_family(p.name), "torch")
        for p in files
    ]


def list_cached_checkpoints() -> list[CacheEntry]:
    """Checkpoints in the Hugging Face and torch hub caches, Hugging Face first, by name."""
    entries: list[CacheEntry] = []
    hf = hf_hub_cache()
    if hf.is_dir():
        entries += _hf_entries(hf)
    th = torch_hub_dir()
    if th.is_dir():
        entries += _torch_entries(th)
    return entries
