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


def block_index(analysis: Any, block: int) -> int:
    """``block`` checked against the analysis's attention layers (negative counts from the
    end); ValueError in one line past them."""
    count = len(analysis.attentions)
    if not -count <= block < count:
        raise ValueError(f"block {block} out of range: the model has {count} blocks")
    return block % count


def token_under(analysis: Any, stage: int, cell: tuple[int, int]) -> int:
    """The token of ``stage``'s grid (row-major, prefix tokens not counted) covering the
    centre of first-grid cell ``cell`` (each first-grid cell ``analysis.patch_size`` pixels,
    each of the stage's ``analysis.stage_pixels[stage]``), clamped to the grid."""
    p = analysis.patch_size
    y, x = (cell[0] + 0.5) * p, (cell[1] + 0.5) * p
    H, W = analysis.stage_grids[stage]
    px = analysis.stage_pixels[stage]
    r = min(max(int(y // px), 0), H - 1)
    c = min(max(int(x // px), 0), W - 1)
    return r * W + c


def with_gradients_of(analyze: Callable[..., Any]) -> Callable[[Any, int | None], Any]:
    """``with_gradients(analysis, target_class)``: ``analysis`` when it holds the gradients of
    ``target_class`` (None: its own class), else the same input analysed again by
    ``analyze(loaded, input, True, c)`` with them, drawn over the same picture (one class kept
    on ``analysis``: the window asks for one at a time)."""

    def with_gradients(analysis: Any, target_class: int | None) -> Any:
        c = analysis.target_class if target_class is None else int(target_class)
        if analysis.gradients is not None and analysis.target_class == c:
            return analysis
        if analysis.loaded is None or analysis.input is None:
            raise ValueError("this method needs the analysis run with gradients=True")
        cache: dict[int, Any] = vars(analysis).setdefault("_with_gradients", {})
        if c not in cache:
            cache.clear()
            again = analyze(analysis.loaded, analysis.input, True, c)
            again.pixels, again.source, again.geometry = (
                analysis.pixels, analysis.source, analysis.geometry,
            )  # fmt: skip
            cache[c] = again
        return cache[c]

    return with_gradients


def head_of_rows(
    analysis: Any, layer: int, head: int, rows: Callable[[], Tensor], noun: str = "block"
) -> Tensor:
    """(h, w) head ``head``'s row of attention layer ``layer`` (an index checked against the
    analysis's layers) (−1: the heads' mean), of ``rows()`` (heads, h, w), asked only once the
    head is checked; ValueError naming the ``noun`` ("block", "layer") past its heads."""
    heads = int(analysis.attentions[layer].shape[0])
    if not -1 <= head < heads:
        raise ValueError(
            f"head {head} out of range: {noun} {layer} has {heads} heads (-1: their mean)"
        )
    out = rows().float()
    return out.mean(dim=0) if head == -1 else out[head]


def rollout_methods(
    version: Callable[[str], MethodCompute],
    refusals: Mapping[str, str],
    requires: Callable[[str, nn.Module], str | None],
) -> dict[str, Any]:
    """The kind's rollout, gradient rollout and relevance (``version(name)`` each), every one
    refusing the parameters ``refusals`` says and running where ``requires`` does."""
    from vitviz.kindapi.protocol import KindMethod

    return {
        name: KindMethod(version(name), refusals=refusals, requires=requires)
        for name in ("rollout", "gradient-rollout", "relevance")
    }
