"""What a kind's ``methods`` module needs to declare its versions of the table's methods
(DESIGN §5): the requirement that the model is vitviz's own network (``requires_own``) and the
compute function of each named version through the kind's one method-map function
(``versions_of``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from torch import Tensor, nn

# (analysis, query cell of the first grid or None, target class or None, parameters) -> map
MethodCompute = Callable[[Any, "tuple[int, int] | None", "int | None", Mapping[str, Any]], Tensor]


def requires_own(noun: str, *networks: type[nn.Module]) -> Callable[[str, nn.Module], str | None]:
    """``KindMethod.requires``: None for one of ``networks``, else why method ``label`` can't
    run on this model (it reads vitviz's own ``noun``'s parts)."""

    def check(label: str, model: nn.Module) -> str | None:
        if isinstance(model, networks):
            return None
        return f"{label} needs vitviz's own {noun}, and this model is a {type(model).__name__}"

    return check


def versions_of(method_map: Callable[..., Tensor]) -> Callable[[str], MethodCompute]:
    """``version(name)``: the compute function of the kind's version of table method ``name``,
    ``method_map(analysis, name, query, target_class, params)``."""

    def version(name: str) -> MethodCompute:
        def compute(
            analysis: Any,
            query: tuple[int, int] | None,
            target_class: int | None,
            params: Mapping[str, Any],
        ) -> Tensor:
            return method_map(analysis, name, query, target_class, params)

        return compute

    return version
