"""The ViTs people study, as Model ▸ Download a model… lists them: ``hub_models.json`` (each
one's hub id, the size of the weights vitviz downloads, what it was trained on and its licence
as the hub stated them on the file's ``as_of`` date). The exact size comes from the hub's file
listing before anything downloads (``hub_fetch.plan_download``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from vitviz.checkpoints.hub_fetch import cached_target

CATALOGUE = Path(__file__).with_name("hub_models.json")


@dataclass(frozen=True)
class CuratedModel:
    """One row of the list."""

    label: str  # "DINO ViT-S/16"
    repo_id: str  # "facebook/dino-vits16"
    size_mb: float  # the weights' size as stated (MB, 10^6 bytes)
    trained_on: str
    licence: str

    def cached(self) -> Path | None:
        """What opens from the cache now (None when it isn't there)."""
        return cached_target(self.repo_id)


def curated_models(path: Path = CATALOGUE) -> tuple[str, list[CuratedModel]]:
    """(the date the table is as of, its rows) from ``path``."""
    data = json.loads(path.read_text(encoding="utf-8"))
    rows = [
        CuratedModel(m["label"], m["id"], float(m["size_mb"]), m["trained_on"], m["licence"])
        for m in data["models"]
    ]
    return str(data["as_of"]), rows
