"""What was knocked out of the model an analysis came from (DESIGN §5, "Interventions"): kept
on the analysis as ``intervention`` and written into its npz, so a file says it came from an
intervened model and which heads and branches."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np


@dataclass(frozen=True)
class InterventionRecord:
    """``heads`` sorted (layer, head) pairs knocked out as ``mode`` says ("zero", "mean",
    "dataset-mean" or "vector"); ``attention`` and ``mlp`` the blocks whose attention or MLP
    branch was zeroed (0-based, sorted)."""

    heads: tuple[tuple[int, int], ...]
    mode: str
    attention: tuple[int, ...] = ()
    mlp: tuple[int, ...] = ()

    @classmethod
    def of(
        cls,
        heads: Sequence[tuple[int, int]],
        ablation: Any,
        attention: Sequence[int] = (),
        mlp: Sequence[int] = (),
    ) -> InterventionRecord:
        """The record of an ablation as ``analyze`` takes it (a mode string, a
        ``DatasetMean`` or a (head_dim,) tensor)."""
        if isinstance(ablation, str):
            mode = ablation
        else:
            mode = "dataset-mean" if hasattr(ablation, "means") else "vector"
        pairs = sorted({(int(layer), int(head)) for layer, head in heads})
        return cls(
            heads=tuple(pairs),
            mode=mode,
            attention=tuple(sorted({int(b) for b in attention})),
            mlp=tuple(sorted({int(b) for b in mlp})),
        )

    def npz_arrays(self) -> dict[str, np.ndarray]:
        """``ablated`` (K, 2) int64 (layer, head), ``ablation`` the mode, ``ablated_attention``
        and ``ablated_mlp`` (blocks,) int64."""
        return {
            "ablated": np.array(self.heads, dtype=np.int64).reshape(-1, 2),
            "ablation": np.array(self.mode, dtype=str),
            "ablated_attention": np.array(self.attention, dtype=np.int64),
            "ablated_mlp": np.array(self.mlp, dtype=np.int64),
        }

    def names(self) -> str:
        """The heads and branches knocked out, as the CLI names them: "0.1, 1.attn, 2.mlp"."""
        names = [f"{layer}.{head}" for layer, head in self.heads]
        names += [f"{b}.attn" for b in self.attention] + [f"{b}.mlp" for b in self.mlp]
        return ", ".join(names)

    def words(self) -> str:
        """What was knocked out, as the CLI names it: "0.1, 1.attn, 2.mlp (zero)"."""
        return f"{self.names()} ({self.mode})"

    def title(self) -> str:
        """A picture's title line: "knocked out (zero ablation): 0.1, 1.attn"; "" for none."""
        names = self.names()
        return f"knocked out ({self.mode} ablation): {names}" if names else ""


A = TypeVar("A")


def mark(analysis: A, record: InterventionRecord) -> A:
    """``analysis`` with ``record`` kept on it as ``intervention``."""
    analysis.intervention = record  # type: ignore[attr-defined]
    return analysis


def intervention_arrays(analysis: Any) -> dict[str, np.ndarray]:
    """The npz arrays of the intervention ``analysis`` came from; none for a clean model's."""
    record = getattr(analysis, "intervention", None)
    return record.npz_arrays() if isinstance(record, InterventionRecord) else {}


def intervention_line(analysis: Any) -> list[str]:
    """The title line naming what was knocked out of ``analysis``'s model; none for a clean
    model's (the window's map title says the same, DESIGN §6)."""
    record = getattr(analysis, "intervention", None)
    title = record.title() if isinstance(record, InterventionRecord) else ""
    return [title] if title else []
