"""Head statistics over many images (the ViT paper's mean attention distance is an average over
a data set, not one image): per layer and head, the mean and standard deviation over images of
the per-image statistics of ``analyze`` (the same definitions as the explain .npz), a CSV of
them and a dot chart of the distance by depth with one colour per checkpoint.

The standard deviation is the population one (ddof 0, over the images analysed).
"""

from __future__ import annotations

import csv
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

CSV_COLUMNS = (
    "checkpoint",
    "layer",
    "head",
    "images",
    "distance_mean",
    "distance_std",
    "entropy_mean",
    "entropy_std",
    "prefix_share_mean",
    "prefix_share_std",
)
STATISTICS = ("distance", "entropy", "prefix_share")  # Analysis: mean_distance, entropy, ...


@dataclass
class RunningMoments:
    """Mean and population variance of (L, H) arrays added one at a time (Welford, float64)."""

    count: int = 0
    mean: np.ndarray | None = None
    m2: np.ndarray | None = None

    def add(self, value: np.ndarray) -> None:
        v = np.asarray(value, dtype=np.float64)
        if self.mean is None:
            self.mean, self.m2 = np.zeros_like(v), np.zeros_like(v)
        assert self.m2 is not None
        if v.shape != self.mean.shape:
            raise ValueError(f"statistics of shape {v.shape} after {self.mean.shape}")
        self.count += 1
        delta = v - self.mean
        self.mean += delta / self.count
        self.m2 += delta * (v - self.mean)

    @property
    def std(self) -> np.ndarray:
        assert self.m2 is not None and self.count > 0
        return np.sqrt(self.m2 / self.count)


@dataclass
class FolderStatistics:
    """One checkpoint's head statistics over the images it analysed: (L, H) each."""

    checkpoint: str
    moments: dict[str, RunningMoments] = field(
        default_factory=lambda: {name: RunningMoments() for name in STATISTICS}
    )
    failed: list[str] = field(default_factory=list)  # "path: why" of the images skipped

    @property
    def images(self) -> int:
        return self.moments["distance"].count

    def add(self, statistics: Mapping[str, np.ndarray]) -> None:
        """One image's statistics: ``ModelKind.head_statistics``, (L, H) each by name."""
        for name in STATISTICS:
            self.moments[name].add(statistics[name])

    def mean(self, name: str) -> np.ndarray:
        m = self.moments[name].mean
        assert m is not None
        return m

    def rows(self) -> list[list[Any]]:
        """CSV rows in CSV_COLUMNS order, layer-major."""
        if self.images == 0:
            return []
        means = {n: self.mean(n) for n in STATISTICS}
        stds = {n: self.moments[n].std for n in STATISTICS}
        L, H = means["distance"].shape
        out = []
        for layer in range(L):
            for head in range(H):
                if all(np.isnan(means[n][layer, head]) for n in STATISTICS):
                    continue  # a head this layer lacks (a Swin's early stages have fewer)
                row: list[Any] = [self.checkpoint, layer, head, self.images]
                for n in STATISTICS:
                    row += [float(means[n][layer, head]), float(stds[n][layer, head])]
                out.append(row)
        return out


def folder_statistics(
    loaded: Any,
    images: Sequence[Path],
    name: str,
    *,
    batch_size: int | None = None,
    progress: Callable[[int, int, Path, str | None], None] | None = None,
    each: Callable[[Any], None] | None = None,
    **analyze_options: Any,
) -> FolderStatistics:
    """Analyse ``images`` with ``loaded`` (forward passes in batches, no gradients) and gather
    the statistics; ``each(item)`` with each image's ``BatchItem`` (its analysis or error),
    then ``progress(done, total, path, error)``."""
    from vitviz.pipeline.batch import iter_kind_analyses

    kind = loaded.kind
    stats = FolderStatistics(name)
    for item in iter_kind_analyses(loaded, images, batch_size=batch_size, **analyze_options):
        path = images[item.index]
        error = None
        if item.error is not None:
            error = str(item.error)
            stats.failed.append(f"{path}: {error}")
        else:
            stats.add(kind.head_statistics(item.analysis))
        if each is not None:
            each(item)
        if progress is not None:
            progress(item.index + 1, len(images), path, error)
        del item
    return stats


def write_csv(results: Iterable[FolderStatistics], path: str | os.PathLike[str]) -> Path:
    """``stats.csv``: a header of CSV_COLUMNS and one row per checkpoint, layer and head."""
    from vitviz.checkpoints.atomic import atomic_path

    target = Path(path)
    with atomic_path(target) as tmp, open(tmp, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_COLUMNS)
        for r in results:
            writer.writerows(r.rows())
    return target


def distance_plot(results: Sequence[FolderStatistics]) -> Any:
    """Mean attention distance by depth, one dot per head, one colour per checkpoint (PIL)."""
    from vitviz.imaging.scatter import DotSeries, dots_by_depth, palette_colour

    series = [
        DotSeries(
            f"{r.checkpoint} ({r.images} images)", r.mean("distance").tolist(), palette_colour(i)
        )
        for i, r in enumerate(results)
        if r.images
    ]
    return dots_by_depth(
        series,
        "Mean attention distance by depth (one dot per head)",
        "mean attention distance (pixels of the model input)",
    )
