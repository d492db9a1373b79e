"""``DeclaredModules``: a kind's loading members and its intermediates accessor written once
over the members of its own modules it names, "module:name" each (``imported`` when first
called, so a kind package stays torch-free when the registry reads it): its config class, its
network, its families, its accessor.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import Tensor, nn

    from vitviz.kindapi.intermediates import HeadReplacement, Intermediates


def imported(reference: str) -> Any:
    """The object "package.module:name" names, its module imported now."""
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name)


class DeclaredModules:
    """Mixin before a kind's base: ``CONFIG`` its config class (``from_dict``), ``NETWORK``
    vitviz's own network class (``NETWORK(config)``), ``FAMILIES`` its checkpoint families,
    ``INTERMEDIATES`` its accessor, ``(model, x, replace=..., logits_only=...)``;
    ``MODEL_NOUN`` how a loading error names its model ("" : ``OWNER`` without its article)."""

    CONFIG: str
    NETWORK: str
    FAMILIES: tuple[str, ...]
    INTERMEDIATES: str
    MODEL_NOUN = ""
    OWNER: str

    @property
    def families(self) -> Sequence[Any]:
        return tuple(imported(family) for family in self.FAMILIES)

    def config_from_dict(self, data: dict[str, object]) -> Any:
        return imported(self.CONFIG).from_dict(data)

    def build_from_state(self, config: Any, state: Mapping[str, Tensor]) -> nn.Module:
        """``NETWORK(config)`` made on the meta device and given ``state``'s tensors exactly
        (a key missing, left over or of another shape: ValueError naming "a PiT model")."""
        import torch

        from vitviz.checkpoints.assign import assign_exactly

        with torch.device("meta"):
            model = imported(self.NETWORK)(config)
        noun = self.MODEL_NOUN or self.OWNER.partition(" ")[2]  # "a PiT" -> "PiT"
        return assign_exactly(model, state, f"{noun} model")

    def intermediates(
        self,
        model: nn.Module,
        x: Tensor,
        *,
        replace: HeadReplacement | None = None,
        logits_only: bool = False,
    ) -> Intermediates:
        """``INTERMEDIATES``: the blocks on their grids, every head before its projection
        (DESIGN §3)."""
        return imported(self.INTERMEDIATES)(model, x, replace=replace, logits_only=logits_only)
