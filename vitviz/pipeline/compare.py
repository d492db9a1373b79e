"""Two models on the same image (DESIGN §5, "Compare"): the head similarity of their query
attention, both predictions and both rollouts, for one image or the mean over several; the
side-by-side picture. Whatever the two models' kinds: the attention is each kind's query maps
(``ModelKind.query_maps``), the maps the method table's."""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from vitviz.checkpoints.atomic import atomic_path
from vitviz.explain.features import head_similarity
from vitviz.explain.methods import carried_kind
from vitviz.kindapi import KindAnalysis, Loaded, ModelKind
from vitviz.pipeline.export import MapSettings, method_map, model_line, prediction_text


@dataclass
class ModelSession:
    """A model and its analysis, as a kind's engine members read them (``kindapi.Session``:
    a member that runs the pass again, a Swin's for a class's gradients, replaces
    ``analysis``)."""

    loaded: Loaded
    analysis: KindAnalysis

    @property
    def kind(self) -> ModelKind:
        return carried_kind(self.analysis)


def query_attention(loaded: Loaded, analysis: KindAnalysis) -> torch.Tensor:
    """(L, H, h, w) float32: every layer's and head's attention of the CLS (or pooled) query
    over the patches, at the head grid's thumbnails (NaN for heads a layer lacks)."""
    shown = carried_kind(analysis).query_maps(ModelSession(loaded, analysis), None)
    return torch.from_numpy(np.asarray(shown.head_maps, dtype=np.float32))


@dataclass(frozen=True)
class Comparison:
    """Two models on one image (or the mean over images): ``head_similarity`` (L, H) or (L, 1)
    (per layer, heads averaged, when the shapes differ); ``logits``/``probs`` of A and B
    (classes,); ``rollout`` of A and B over each model's clickable grid."""

    head_similarity: np.ndarray
    logits_a: np.ndarray
    logits_b: np.ndarray
    probs_a: np.ndarray
    probs_b: np.ndarray
    rollout_a: np.ndarray
    rollout_b: np.ndarray

    def arrays(self, names_a: Sequence[str], names_b: Sequence[str]) -> dict[str, np.ndarray]:
        """The compare npz's arrays (docs/cli.md, "compare")."""
        return {
            "head_similarity": self.head_similarity.astype(np.float32),
            "logits_a": self.logits_a.astype(np.float32),
            "logits_b": self.logits_b.astype(np.float32),
            "probs_a": self.probs_a.astype(np.float32),
            "probs_b": self.probs_b.astype(np.float32),
            "rollout_a": self.rollout_a.astype(np.float32),
            "rollout_b": self.rollout_b.astype(np.float32),
            "class_names_a": np.array(list(names_a), dtype=str),
            "class_names_b": np.array(list(names_b), dtype=str),
        }


def compare_analyses(
    loaded_a: Loaded, a: KindAnalysis, loaded_b: Loaded, b: KindAnalysis
) -> Comparison:
    """The comparison of two analyses of the same image."""
    sim = head_similarity(query_attention(loaded_a, a), query_attention(loaded_b, b))
    return Comparison(
        head_similarity=sim.numpy(),
        logits_a=a.logits.detach().cpu().float().numpy(),
        logits_b=b.logits.detach().cpu().float().numpy(),
        probs_a=a.probs.detach().cpu().float().numpy(),
        probs_b=b.probs.detach().cpu().float().numpy(),
        rollout_a=method_map(a, "rollout", MapSettings()),
        rollout_b=method_map(b, "rollout", MapSettings()),
    )


def mean_comparison(items: Sequence[Comparison]) -> Comparison:
    """The mean over images of each array (a NaN of one image stays out of its mean)."""
    if not items:
        raise ValueError("no images to compare")

    def mean(name: str) -> np.ndarray:
        stack = np.stack([getattr(c, name) for c in items]).astype(np.float64)
        with warnings.catch_warnings():  # an all-NaN cell stays NaN, unsaid
            warnings.simplefilter("ignore", RuntimeWarning)
            return np.nanmean(stack, axis=0).astype(np.float32)

    return Comparison(**{name: mean(name) for name in Comparison.__dataclass_fields__})


def write_compare_npz(
    comparison: Comparison,
    path: str | os.PathLike[str],
    names_a: Sequence[str],
    names_b: Sequence[str],
) -> Path:
    """The compare npz, written atomically."""
    target = Path(path)
    with atomic_path(target) as tmp, open(tmp, "wb") as f:
        np.savez(f, **comparison.arrays(names_a, names_b))
    return target


def side_by_side(
    a: KindAnalysis, b: KindAnalysis, comparison: Comparison, colormap: str = "viridis"
) -> Image.Image:
    """Both models' rollouts over the image, each titled with its prediction and model."""
    pictures = []
    for tag, analysis, rollout in (("A", a, comparison.rollout_a), ("B", b, comparison.rollout_b)):
        title = [f"{tag}: rollout · {prediction_text(analysis)}", *model_line(analysis)]
        pictures.append(carried_kind(analysis).map_picture(analysis, rollout, colormap, 512, title))
    height = max(p.height for p in pictures)
    out = Image.new("RGB", (sum(p.width for p in pictures) + 16, height), "white")
    x = 0
    for p in pictures:
        out.paste(p.convert("RGB"), (x, 0))
        x += p.width + 16
    return out
