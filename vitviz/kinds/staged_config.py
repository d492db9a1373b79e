"""``StagedConfig``: what the configs of the staged kinds share (a Swin's, a pyramid ViT's, a
Hiera's; DESIGN §3): per-stage tuples, their counts, the dict a native file keeps. Torch-free."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Self


class StagedConfig:
    """Mixin of a dataclass with per-stage ``depths`` and ``dims``; ``NOUN`` names it in
    messages ("Swin")."""

    NOUN: ClassVar[str]
    depths: tuple[int, ...]
    dims: tuple[int, ...]

    @property
    def num_stages(self) -> int:
        return len(self.depths)

    @property
    def depth(self) -> int:
        """Blocks in all stages."""
        return sum(self.depths)

    @property
    def dim(self) -> int:
        """Width of the last stage (the features the head reads)."""
        return self.dims[-1]

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)  # type: ignore[call-overload]
        return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        """The config of ``to_dict``'s dict; ValueError naming fields it does not know."""
        known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown {cls.NOUN} config fields: {', '.join(unknown)}")
        return cls(**data)
